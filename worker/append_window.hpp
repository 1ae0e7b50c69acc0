// A worker connection's window of APPENDs not yet durable (worker_options::max_appends_in_flight).
// The server refuses APPENDs past its own limit, counting those still in its log's queue. An
// APPEND's slot is freed by the DURABLE covering it; a shard given back keeps its APPENDs' slots
// until the answer to its RELEASE (OK once they are durable, ERR IO once the log failed, an ERR
// at once if the lease had already ended); a revoked shard's are freed when REVOKED comes, while
// the server may still count them (worker_options::max_appends_in_flight leaves room for that).
// No I/O, no lock: the session calls it on its own thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>

namespace fusee::worker {

class append_window {
public:
  /// `limit` APPENDs out at most; 0 counts as 1 (a window of 0 would never send).
  explicit append_window(size_t limit) : limit_(limit == 0 ? 1 : limit) {}

  /// No APPEND may be sent now.
  bool full() const { return out_ >= limit_; }
  /// APPENDs counted against the window now (those of shards being released included).
  size_t out() const { return out_; }

  /// An APPEND of `shard` whose last record is `last_lsn` was sent.
  void sent(uint32_t shard, uint64_t last_lsn);
  /// `shard`'s records up to `lsn` are durable: the APPENDs they end free their slots.
  void durable(uint32_t shard, uint64_t lsn);
  /// `shard` was given back with the RELEASE of request `id`: its APPENDs keep their slots
  /// until the server answers it (answered()).
  void releasing(uint32_t shard, uint64_t id);
  /// The server answered request `id` (OK or ERR): true if it was a RELEASE that held slots,
  /// free now.
  bool answered(uint64_t id);
  /// `shard`'s lease ended without a RELEASE (revoked, or granted anew): its slots are free now.
  /// REVOKED comes once the revocation is queued in the log, so the server may still count the
  /// shard's APPENDs waiting in that queue, sent before or after it.
  void forget(uint32_t shard);

private:
  size_t limit_;
  size_t out_ = 0;
  /// The last LSN of each APPEND sent per shard and not yet durable.
  std::map<uint32_t, std::deque<uint64_t>> unsynced_;
  /// RELEASE request id -> the slots its shard's APPENDs hold until it is answered.
  std::map<uint64_t, size_t> releases_;
};

}  // namespace fusee::worker
