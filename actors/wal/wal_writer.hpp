// The node's write-ahead log: one writer thread doing group commit for every shard, and the
// recovery that rebuilds each shard's state from the segment files at start.
//
// Durability contract: a completion (on_durable, on_granted, the OK that answers a checkpoint)
// is reported only after the bytes it covers were written and fdatasync'ed. Nothing refused, failed
// or unwritten is ever reported durable. A grant covers the shard's durable LSN and its epoch: it
// is reported at once when that LSN is already durable and the epoch lies within the epoch
// reservation on disk (format.hpp, `reserve`: after a restart every grant is above it), so epochs
// only grow across crashes although such a grant writes nothing of its own. Appends are checked at
// commit: the section's epoch must be the shard's live lease held by the submitting session, and
// its first LSN must follow the shard's last queued LSN; otherwise nothing is written and
// on_refused names the reason.
//
// The writer thread also wakes about once a second while the log is idle, to check that the data
// dir is still in place (failing the log if not; it may then commit what an I/O thread queued).
//
// Threading: submit() may be called from any thread and wakes the writer thread. An I/O thread
// (one that may block) instead enqueue()s what it read and then commit()s: if nobody is committing
// it writes the batch itself, with no hand-off to another thread. Whoever commits keeps doing so
// while entries are queued, so there is one committer at a time: every sink callback runs on the
// committing thread (the writer thread, an I/O thread, or for a grant made at once the thread
// that asked for it), batch by batch: nothing of a batch is reported before the batch before it.
// Within a batch, its refusals and the grants that write nothing go out once it is written, before
// its fdatasync; what waits for the disk (DURABLE, checkpoints' OK, loads and reads) after it. So
// a session may hear an ERR for a request before the DURABLE or OK of an earlier one of the same
// batch (answers carry request ids; DURABLE is a position, not an answer). Checkpoints, loads and
// reads are checked against the leases where they stand in the queue and served once their batch
// is durable, before its revocations are reported. When more is queued once a batch that answers
// two or more sessions is durable, its report waits until the next batch is written and its disk
// write begun (or, if that batch writes nothing, admitted), and goes out before that one's
// fdatasync (the disk works while the answers are sent); the next batch's own refusals and grants
// that write nothing follow it. A batch answering one session, or with checkpoints, loads or reads
// (which must see the log as it was when they were queued), reports before the next is admitted. A
// batch whose write or fdatasync fails (or whose segment turns out deleted) tells its appends'
// sessions IO_FAILED, refuses its checkpoints and answers its loads and reads from what was
// durable; its revocations, and every later one, are reported with the failure (lease_log.hpp). An
// I/O thread's commit() may hold appends a little for the sessions the last report told DURABLE
// (commit_hold.hpp); it then returns how long the thread may read on first. No CAF here: the glue
// lives in log_sink.
//
// The pieces live in actors/wal/: the on-disk format (format.hpp), file I/O (file_io.hpp),
// recovery (recovery.hpp), the segment files (segments.hpp), checkpoints (checkpoints.hpp), the
// hold of group commit (commit_hold.hpp), a shard's state (shard_log.hpp) and its index
// (section_index.hpp); this file is the writer: admission, batching, acknowledgements, failures
// and reads.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "actors/histogram.hpp"
#include "actors/lease_log.hpp"
#include "actors/wal/options.hpp"
#include "protocol/errors.hpp"
#include "protocol/ids.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

using proto::bytes;
using proto::epoch_t;
using proto::lsn_t;
using proto::shard_id;

// -- what callers submit ------------------------------------------------------------------------

/// An APPEND's records on their way to the log: views into `storage`, which is the frame body
/// they were decoded from (proto::decode_append_view) or the records packed together (pack), so
/// no record needs an allocation of its own. Move-only: a move keeps the views valid.
struct append_records {
  bytes storage;
  std::vector<proto::byte_view> views;

  append_records() = default;
  append_records(bytes body, std::vector<proto::byte_view> into_body)
      : storage(std::move(body)), views(std::move(into_body)) {}
  append_records(append_records&&) noexcept = default;
  append_records& operator=(append_records&&) noexcept = default;
  append_records(const append_records&) = delete;
  append_records& operator=(const append_records&) = delete;

  /// Copies `records` into one buffer.
  static append_records pack(const std::vector<bytes>& records);
  size_t size() const { return views.size(); }
};

struct wal_append {
  session_id session = 0;
  uint64_t request_id = 0;
  shard_id shard;
  epoch_t epoch;
  lsn_t first_lsn;
  append_records records;
  /// Decremented when the writer takes the append from its queue (before it is answered): the
  /// submitting connection's appends waiting for the log. Null: not counted.
  std::shared_ptr<std::atomic<uint32_t>> in_flight;
};

/// Makes `session` the holder of `shard` under the next epoch; durable before it is reported.
struct wal_grant {
  uint64_t token = 0;  ///< echoed in on_granted
  session_id session = 0;
  shard_id shard;
};

/// Ends the live lease of `shard` if it is still (`holder`, `epoch`); reported once every record
/// queued before it is durable or refused. The directory's revocation as it is (lease_log.hpp).
using wal_revoke = revocation;

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

/// Receives the writer's reports, on the committing thread (see the threading contract at the
/// top). Implementations must not block.
class wal_sink {
public:
  virtual ~wal_sink() = default;
  /// New durable positions for one session, cumulative per shard.
  virtual void on_durable(session_id s, std::vector<proto::position> positions) = 0;
  virtual void on_refused(session_id s, uint64_t request_id, proto::error e) = 0;
  virtual void on_granted(std::vector<grant_done> grants) = 0;
  /// The revocations of one batch, in the order they were queued; with a `failure` (the log's),
  /// the batch could not be written (lease_log::revoke).
  virtual void on_revoked(std::vector<revocation_done> revoked, std::string failure) = 0;
  /// An answer to a checkpoint, load or read: a whole message for the session.
  virtual void on_answer(session_id s, proto::any_message answer) = 0;
  /// A write or fsync failed: nothing after the session's last DURABLE for `shard` was written.
  virtual void on_io_failed(session_id s, shard_id shard, epoch_t epoch, std::string message) = 0;
  /// The log failed (a write, fdatasync or roll), once: it refuses every append and grant until
  /// restart. Told before the failed batch's DURABLE, IO_FAILED, grants and revocations (after
  /// its refusals and the grants it made without writing, which go out before the write).
  virtual void on_failed(std::string failure) = 0;
};

class wal_writer final : public lease_log {
public:
  /// Opens (creating if needed) and recovers the log (wal/recovery.hpp lists the outcomes),
  /// then starts the writer thread. Fails with a message naming the file on a shard-count
  /// mismatch or on damage anywhere but a torn tail of the last segment.
  static proto::result<std::unique_ptr<wal_writer>> open(const wal_options& opts, wal_sink* sink,
                                                         wal_recovery_report* report = nullptr);
  ~wal_writer() override;
  wal_writer(const wal_writer&) = delete;
  wal_writer& operator=(const wal_writer&) = delete;

  /// Queues one entry; the writer thread takes everything queued at once (group commit).
  void submit(wal_entry e);
  /// Queues entries in order, 4,096 per hold of the queue's lock: entries further apart may
  /// fall into different batches.
  void submit(std::vector<wal_entry> es);

  /// Queues one entry without waking anyone: commit() must follow.
  void enqueue(wal_entry e);
  /// Writes what is queued on this thread if no other thread commits (and then until nothing is
  /// queued); otherwise the committing thread takes it. Blocks: never call it on a CAF thread.
  /// Or holds it (commit_hold.hpp): nothing but appends is queued and some sessions the last
  /// report told DURABLE have not appended again yet. Then it returns how long the caller may
  /// read on before it calls again (at the latest when that time is up; nothing is written
  /// meanwhile unless another thread commits); zero otherwise.
  [[nodiscard]] std::chrono::nanoseconds commit();

  /// Stops the thread after writing what is queued.
  void stop();

  // lease_log: grants and revocations are entries of the same queue as the appends.
  void grant(uint64_t token, session_id session, shard_id shard) override;
  /// Made on the calling thread (which takes the committer role for the decision: no I/O, never
  /// blocks but on the queue's lock) when nobody commits, nothing is queued and the grant writes
  /// nothing: within the reservation on disk, nothing of the shard waiting to be durable.
  bool grant_at_once(uint64_t token, session_id session, shard_id shard) override;
  void revoke(std::vector<revocation> revocations) override;
  /// The last epoch that may have been granted for each shard before this start: the epoch
  /// reservation recovered, or the shard's last granted epoch if higher (for start-up decisions).
  epoch_t recovered_epoch(shard_id s) const override;
  lsn_t recovered_durable_lsn(shard_id s) const;

  struct stats {
    uint64_t batches = 0;
    uint64_t records = 0;
    uint64_t fsyncs = 0;
    uint64_t segments = 0;
    uint64_t retired_segments = 0;
    uint64_t appends = 0;          ///< APPEND requests taken (admitted)
    uint64_t refused = 0;          ///< requests refused (fencing, LSN gaps, a failed log)
    uint64_t bytes_written = 0;    ///< batch bytes written and fsync'ed
    uint64_t queued = 0;           ///< entries waiting for a committer now
    bool committing = false;       ///< a thread holds the committer role now
    bool writer_sleeping = false;  ///< the writer thread waits for work (tests await an idle log)
    uint64_t checkpoints = 0;      ///< checkpoints stored
    /// Grants reported without waiting for an fdatasync (within the epoch reservation, nothing
    /// of the shard waiting to be durable).
    uint64_t grants_without_fsync = 0;
    /// Batches written by the thread that read their requests (an I/O thread's commit()), not
    /// handed to the writer thread; a segment roll's first batch written there counts too.
    uint64_t batches_inline = 0;
    /// Commits held for the sessions the last report told DURABLE (commit_hold.hpp): holds that
    /// every such session's next append ended, and holds that ran out first.
    uint64_t holds_met = 0;
    uint64_t holds_missed = 0;
    bool failed = false;  ///< a write, fdatasync or roll failed; appends refused until restart
    std::string failure;
    /// Background zero-fills of the next segment that failed; each roll then filled its spare
    /// itself and went on. The last one's error (the log is not failed by it).
    uint64_t spare_failures = 0;
    std::string spare_failure;
    /// Checkpoints that could not be stored (a full disk, say); each refused to its worker, which
    /// tries again later: the log is not failed by it, but no segment is retired meanwhile. The
    /// last one's error.
    uint64_t checkpoint_failures = 0;
    std::string checkpoint_failure;
    histogram fsync_seconds;      ///< write + fdatasync of one batch
    histogram records_per_fsync;  ///< records in one batch
    /// One roll to a new segment: waiting for the zero-filled spare (if its fill is not done),
    /// its header, the snapshot; the commits behind it wait as long.
    histogram roll_seconds;
  };
  stats get_stats() const;
  /// The log's failure, "" while it works (any thread, cheap: for health checks).
  std::string failure() const;
  /// The shard's durable LSN now (any thread; 0 for no such shard).
  uint64_t durable_lsn(uint32_t shard) const;

  /// Test hook (fault injection): the next batch write fails as if the disk returned EIO.
  void inject_write_failure();
  /// Test hook (fault injection): the next batch is written but its fdatasync fails (EIO).
  void inject_sync_failure();
  /// Test hook (fault injection): the next segment roll fails (as if the new segment could not
  /// be prepared).
  void inject_roll_failure();
  /// Test hook (fault injection): the next roll finds its spare's background zero-fill failed
  /// (EIO); the roll fills one itself.
  void inject_spare_failure();
  /// Test hook: FUSEE_TEST_DROP_ACKNOWLEDGED was set (in a build with FUSEE_TEST_HOOKS): appends
  /// are acknowledged and never written, for `fusee load`'s checks to catch.
  bool drops_acknowledged() const;

  struct impl;

private:
  explicit wal_writer(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace fusee::server
