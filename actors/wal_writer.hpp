// The node's write-ahead log: one writer thread doing group commit for every shard, and the
// recovery that rebuilds each shard's state from the segment files at start.
//
// Durability contract: a completion (on_durable, on_granted, on_checkpointed) is reported only
// after the bytes it covers were written and fdatasync'ed. Nothing refused, failed or unwritten
// is ever reported durable. Appends are checked at commit: the section's epoch must be the
// shard's live lease held by the submitting session, and its first LSN must follow the shard's
// last queued LSN; otherwise nothing is written and on_refused names the reason.
//
// Threading: submit() may be called from any thread; every sink callback runs on the writer
// thread, in submission order per session. No CAF here: the glue lives in log_sink.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <variant>
#include <vector>

#include "actors/lease_log.hpp"
#include "protocol/errors.hpp"
#include "protocol/ids.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

using proto::bytes;
using proto::epoch_t;
using proto::lsn_t;
using proto::shard_id;

// -- what callers submit ------------------------------------------------------------------------

struct wal_append {
  session_id session = 0;
  uint64_t request_id = 0;
  shard_id shard;
  epoch_t epoch;
  lsn_t first_lsn;
  std::vector<bytes> records;
};

/// Makes `session` the holder of `shard` under the next epoch; durable before it is reported.
struct wal_grant {
  uint64_t token = 0;  ///< echoed in on_granted
  session_id session = 0;
  shard_id shard;
};

/// Ends the live lease of `shard` if it is still (`session`, `epoch`); reported once every record
/// queued before it is durable or refused.
struct wal_revoke {
  uint64_t token = 0;
  shard_id shard;
  epoch_t epoch;
  session_id session = 0;
};

struct wal_checkpoint {
  session_id session = 0;
  uint64_t request_id = 0;
  shard_id shard;
  epoch_t epoch;
  lsn_t lsn;
  bytes data;
};

struct wal_load_checkpoint {
  session_id session = 0;
  uint64_t request_id = 0;
  shard_id shard;
  epoch_t epoch;
};

struct wal_read {
  session_id session = 0;
  uint64_t request_id = 0;
  shard_id shard;
  epoch_t epoch;
  lsn_t after;
  uint32_t max_bytes = 0;
};

using wal_entry =
    std::variant<wal_append, wal_grant, wal_revoke, wal_checkpoint, wal_load_checkpoint, wal_read>;

// -- what the writer reports ------------------------------------------------------------------

struct granted_shard {
  uint64_t token = 0;
  session_id session = 0;
  shard_id shard;
  epoch_t epoch;
  lsn_t durable_lsn;
};

/// Receives the writer's reports, on the writer thread. Implementations must not block.
class wal_sink {
public:
  virtual ~wal_sink() = default;
  /// New durable positions for one session, cumulative per shard.
  virtual void on_durable(session_id s, std::vector<proto::position> positions) = 0;
  virtual void on_refused(session_id s, uint64_t request_id, proto::error e) = 0;
  virtual void on_granted(std::vector<granted_shard> grants) = 0;
  virtual void on_revoked(uint64_t token, shard_id shard, epoch_t epoch) = 0;
  /// An answer to a checkpoint, load or read: a whole message for the session.
  virtual void on_answer(session_id s, proto::any_message answer) = 0;
  /// A write or fsync failed: nothing after the session's last DURABLE for `shard` was written.
  virtual void on_io_failed(session_id s, shard_id shard, epoch_t epoch, std::string message) = 0;
};

struct wal_options {
  std::filesystem::path
      dir;  ///< data dir; the log lives in dir/wal, checkpoints in dir/checkpoints
  uint32_t shards = 16;
  uint64_t segment_bytes = 16ull << 20;  ///< preallocated size; a new segment starts past it
  uint32_t max_read_bytes = 16u << 20;   ///< cap on one RECOVER_LOG page (the first record always)
  uint32_t spin_us = 100;  ///< longest the writer spins for more work before it sleeps (0: never)
};

/// What recovery found, for logs and tests.
struct wal_recovery_report {
  uint64_t segments = 0;
  uint64_t batches = 0;
  uint64_t records = 0;
  uint64_t torn_bytes = 0;  ///< dropped from the tail of the last segment
  std::string torn_reason;
};

class wal_writer final : public lease_log {
public:
  /// Opens (creating if needed) and recovers the log. Fails with a message on a shard-count
  /// mismatch or on corruption anywhere but the tail of the last segment.
  static std::unique_ptr<wal_writer> open(const wal_options& opts, wal_sink* sink,
                                          std::string* error,
                                          wal_recovery_report* report = nullptr);
  ~wal_writer() override;
  wal_writer(const wal_writer&) = delete;
  wal_writer& operator=(const wal_writer&) = delete;

  /// Queues one entry; the writer thread takes everything queued at once (group commit).
  void submit(wal_entry e);
  void submit(std::vector<wal_entry> es);

  /// Stops the thread after writing what is queued.
  void stop();

  // lease_log: grants and revocations are entries of the same queue as the appends.
  void grant(uint64_t token, session_id session, shard_id shard) override;
  void revoke(uint64_t token, shard_id shard, epoch_t epoch, session_id holder) override;
  /// The epoch last granted for each shard (as recovered; for start-up decisions only).
  epoch_t recovered_epoch(shard_id s) const override;
  lsn_t recovered_durable_lsn(shard_id s) const;

  struct stats {
    uint64_t batches = 0;
    uint64_t records = 0;
    uint64_t fsyncs = 0;
    uint64_t segments = 0;
    uint64_t retired_segments = 0;
  };
  stats get_stats() const;

  /// Test hook (fault injection): the next batch write fails as if the disk returned EIO.
  void inject_write_failure();

  /// The fdatasync latency of the disk under `dir`: n timed pwrite+fdatasync of 4 KiB, either
  /// appending to a growing file or overwriting a preallocated one (what the log does), with
  /// `idle_ms` of idle time before each (a cold wake's grant comes after idle time). Blocks.
  static std::vector<double> measure_fsync_us(const std::filesystem::path& dir, int n,
                                              bool preallocated, int idle_ms = 0);

  struct impl;

private:
  explicit wal_writer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace fusee::server
