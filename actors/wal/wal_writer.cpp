#include "actors/wal/wal_writer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_set>

#include "actors/lease_rules.hpp"
#include "actors/node_settings.hpp"
#include "actors/wal/checkpoints.hpp"
#include "actors/wal/commit_hold.hpp"
#include "actors/wal/recovery.hpp"
#include "logging/logging.hpp"
#include "logging/warning_limiter.hpp"

namespace fusee::server {

using proto::err_code;
using namespace wal;

namespace {
/// At least what an APPEND adds to a batch's body: its records section (a header of at most 32
/// bytes, a u32 length and the bytes of each record); `storage` holds at least every record's
/// bytes (the frame body they were read from, or the records packed).
uint64_t batch_bytes_of(const wal_append& a) {
  return a.records.storage.size() + 4 * uint64_t{a.records.size()} + 32;
}

// The batch that reaches the limit adds at most one APPEND (a frame: at most 96 MiB of records,
// each at least 1 byte of it, so at most 4 x that in lengths) and the small entries among them.
static_assert(max_batch_appends_bytes + 6 * uint64_t{proto::max_body_size} < wal::max_batch_body,
              "a batch's body fits the format's u32 length");

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

append_records append_records::pack(const std::vector<bytes>& records) {
  size_t total = 0;
  for (auto& r : records)
    total += r.size();
  append_records out;
  out.storage.reserve(total);
  for (auto& r : records)
    out.storage.insert(out.storage.end(), r.begin(), r.end());
  out.views.reserve(records.size());
  size_t at = 0;
  for (auto& r : records) {
    out.views.push_back(proto::byte_view{out.storage}.subspan(at, r.size()));
    at += r.size();
  }
  return out;
}

wal_options wal_options::of(const node_settings& settings) {
  wal_options o;
  o.dir = settings.data_dir;
  o.shards = settings.shards;
  o.segment_bytes = settings.segment_mb << 20;
  return o;
}

struct wal_writer::impl {
  /// Held while the log is open (first member: released after everything else, the segments'
  /// background fill included), so no second server writes the data dir meanwhile.
  file dir_lock;
  wal_options opts;
  wal_sink* sink = nullptr;
  std::vector<shard_log> shards;
  // Epoch reservation (format.hpp, `reserve`): a grant whose epoch is within the reservation
  // already on disk needs no fdatasync of its own. A new reservation of reserve_block epochs is
  // written ahead, with a batch that is written anyway or one of its own, once half of it is used.
  static constexpr uint64_t reserve_block = uint64_t{1} << 20;
  uint64_t epoch_floor = 0;  ///< every grant of this run is above it (the recovered reservation)
  uint64_t reserved = 0;     ///< the highest reservation written and synced
  uint64_t max_granted = 0;  ///< the highest epoch granted in this run, any shard
  segment_set segments;
  checkpoint_store checkpoints;
  bool broken = false;  ///< a write, fdatasync or roll failed: later appends refused until restart
  std::string broken_reason;
  /// When in_place() last looked (now_ns): the committer looks about once a second
  /// (opts.place_check_ms), the writer thread too while the log is idle.
  int64_t place_checked_ns = 0;
  const int64_t place_check_ns = int64_t{opts.place_check_ms} * 1'000'000;

  mutable std::mutex mtx;
  std::condition_variable cv;
  std::vector<wal_entry> queue;
  std::atomic<size_t> queued{0};  ///< entries in `queue`, readable without the lock
  bool sleeping = false;          ///< the writer thread waits on `cv` (guarded by mtx)
  bool committing = false;        ///< a thread is committing batches (guarded by mtx)
  /// The next commit's wait for the sessions the last report told DURABLE (guarded by mtx).
  commit_hold appends_hold;
  size_t queued_others = 0;   ///< entries in `queue` that are not appends (guarded by mtx)
  uint64_t queued_bytes = 0;  ///< batch_bytes_of() the appends in `queue` (guarded by mtx)
  /// Sessions the last report told DURABLE, and how long that batch's write and fdatasync took
  /// (the committer's).
  std::vector<session_id> told;
  int64_t last_commit_ns = 0;

  bool stopping = false;
  std::thread thread;

  std::atomic<bool> inject_failure{false}, inject_sync_failure{false}, inject_roll_failure{false},
      inject_spare_failure{false};
  /// Test hook (FUSEE_TEST_DROP_ACKNOWLEDGED set): appends are acknowledged and never written, the
  /// broken server `fusee load`'s checks must catch; set to "after:N", only each shard's records
  /// past LSN N are. The server warns at start when it is set. Compiled in only with
  /// -DFUSEE_TEST_HOOKS=ON (the default for development builds).
#ifdef FUSEE_TEST_HOOKS
  const bool drop_acknowledged = std::getenv("FUSEE_TEST_DROP_ACKNOWLEDGED") != nullptr;
  const uint64_t drop_after = [] {
    const char* v = std::getenv("FUSEE_TEST_DROP_ACKNOWLEDGED");
    return v && std::strncmp(v, "after:", 6) == 0 ? std::strtoull(v + 6, nullptr, 10) : 0;
  }();
  /// Test hook (FUSEE_TEST_SYNC_DELAY_MS=N): each batch's fdatasync starts N ms late, as on a
  /// disk that stalls; the server logs an error at start when it is set.
  const std::chrono::milliseconds sync_delay{[] {
    const char* v = std::getenv("FUSEE_TEST_SYNC_DELAY_MS");
    return v ? std::strtoll(v, nullptr, 10) : 0;
  }()};
  /// Test hook (FUSEE_TEST_FAIL_SYNC_AT_LSN=N): the fdatasync of the first batch that takes any
  /// shard's records to LSN N or past it fails (EIO), once; the server logs an error at start.
  const uint64_t fail_sync_at_lsn = [] {
    const char* v = std::getenv("FUSEE_TEST_FAIL_SYNC_AT_LSN");
    return v ? std::strtoull(v, nullptr, 10) : 0;
  }();
  bool failed_sync_at_lsn = false;
#else
  static constexpr bool drop_acknowledged = false;
  static constexpr uint64_t drop_after = 0;
  static constexpr std::chrono::milliseconds sync_delay{0};
  static constexpr uint64_t fail_sync_at_lsn = 0;
  bool failed_sync_at_lsn = false;
#endif
  std::atomic<uint64_t> n_batches{0}, n_records{0}, n_fsyncs{0}, n_retired{0}, n_segments{0};
  std::atomic<uint64_t> n_appends{0}, n_refused{0}, n_bytes{0}, n_checkpoints{0};
  std::atomic<uint64_t> n_early_grants{0}, n_batches_inline{0};
  std::atomic<bool> failed{false};
  mutable std::mutex failure_mtx;  ///< guards the *_text fields below (get_stats)
  std::string failure_text;
  std::string spare_failure_text;  ///< segment_set::spare_failure(), for get_stats
  std::atomic<uint64_t> n_spare_failures{0};
  std::string checkpoint_failure_text;  ///< the last checkpoint not stored, for get_stats
  std::atomic<uint64_t> n_checkpoint_failures{0};
  logging::warning_limiter checkpoint_warnings;  ///< one line a minute at most
  histogram_recorder<32> fsync_seconds{"fsync_seconds", latency_bounds()};
  histogram_recorder<32> records_per_fsync{"records_per_fsync", batch_bounds()};
  histogram_recorder<32> roll_seconds{"roll_seconds", latency_bounds()};
  /// Each shard's durable LSN, readable from any thread (introspection).
  std::unique_ptr<std::atomic<uint64_t>[]> durable;

  impl(const wal_options& o, wal_sink* s, recovered_log&& log)
      : dir_lock(std::move(log.lock)), opts(o), sink(s), shards(std::move(log.shards)),
        epoch_floor(log.epoch_reserved), reserved(log.epoch_reserved),
        segments(std::move(log.segments)), checkpoints(o.dir / "checkpoints"),
        durable(new std::atomic<uint64_t>[shards.size()]) {
    appends_hold = commit_hold{o.hold_min_window_ns};
    n_segments = segments.count();
    for (size_t i = 0; i < shards.size(); ++i)
      durable[i].store(shards[i].durable_lsn, std::memory_order_relaxed);
  }

  /// What one batch reports, in this order, once it is durable (or failed): DURABLE per
  /// session, grants, revocations, IO_FAILED; then its checkpoints, loads and reads are served.
  /// (Refusals and the grants that write nothing go out before it, once the batch is written:
  /// process(), hand_over.)
  ///
  /// The committer keeps two (the batch being made and the one whose report is owed) and clears
  /// them for reuse, so a batch allocates nothing for its report but the frames themselves.
  struct batch_report {
    struct ack {
      session_id session;
      uint32_t shard;
      proto::position pos;
    };
    /// The DURABLE positions: in admission order while the batch is made; settle() sorts them by
    /// session and shard and keeps the last (highest) of each shard's.
    std::vector<ack> acks;
    std::vector<grant_done> grants;
    std::vector<revocation_done> revokes;
    std::vector<std::tuple<session_id, uint32_t, epoch_t>> io_failed;  ///< session, shard, epoch
    std::string failure;
    std::vector<wal_entry*> after_commit;  ///< checkpoints, loads, reads: served after it

    void settle() {
      // A shard's appends in one batch have growing LSNs: the last of each (session, shard) is
      // its highest.
      std::sort(acks.begin(), acks.end(), [](const ack& a, const ack& b) {
        return std::tie(a.session, a.shard, a.pos.lsn) < std::tie(b.session, b.shard, b.pos.lsn);
      });
      size_t kept = 0;
      for (size_t i = 0; i < acks.size(); ++i) {
        if (kept > 0 && acks[kept - 1].session == acks[i].session &&
            acks[kept - 1].shard == acks[i].shard) {
          acks[kept - 1] = acks[i];  // a later append of the same shard in this batch
          continue;
        }
        acks[kept++] = acks[i];
      }
      acks.resize(kept);
    }
    void clear() {  // grants and revocations were moved out; the rest is let go if a burst grew it
      acks.clear();
      release_if_large(acks);
      grants.clear();
      revokes.clear();
      io_failed.clear();
      release_if_large(io_failed);
      failure.clear();
      after_commit.clear();
      release_if_large(after_commit);
    }
  };
  /// The committer's two reports (commit_loop), kept for their buffers.
  batch_report report_a, report_b;
  /// The committer's buffers for the batch being made (process()), kept for their capacity (up to
  /// kept_buffer_limit, format.hpp).
  bytes batch_body;
  struct pending_index {
    uint32_t shard;
    section_ref ref;  ///< offset relative to the batch body until it is written
  };
  std::vector<pending_index> batch_sections;
  /// For IO_FAILED: session, shard and the epoch it appended under, once each (deduplicated
  /// only if the batch fails).
  std::vector<std::tuple<session_id, uint32_t, uint64_t>> batch_touched;
  records_section batch_section;
  struct refusal {
    session_id session;
    uint64_t request_id;
    proto::error error;
  };
  /// While a batch is admitted, its refusals wait here for the batch before it to be reported
  /// (so nothing of a batch goes out before the batch before it); null: sent at once.
  std::vector<refusal>* held_refusals = nullptr;

  void refuse(session_id session, uint64_t request_id, proto::error e) {
    n_refused.fetch_add(1, std::memory_order_relaxed);
    if (held_refusals)
      held_refusals->push_back({session, request_id, std::move(e)});
    else
      sink->on_refused(session, request_id, std::move(e));
  }

  /// Queues `e` (under mtx); true if the writer thread sleeps with nobody committing, so it must
  /// be woken for it.
  bool push(wal_entry&& e) {
    if (auto* a = std::get_if<wal_append>(&e)) {
      appends_hold.appended(a->session);
      queued_bytes += batch_bytes_of(*a);
    } else {
      queued_others++;
    }
    queue.push_back(std::move(e));
    queued.store(queue.size(), std::memory_order_release);
    return sleeping && !committing;
  }

  /// Queues `items` in order (each a wal_entry alternative), a chunk per lock hold: a million
  /// revocations neither hold the queue's lock against the I/O threads for long nor wait as one
  /// batch.
  template <class T>
  void push_all(std::vector<T>& items) {
    constexpr size_t chunk = 4096;
    for (size_t i = 0; i < items.size();) {
      bool wake = false;
      {
        std::lock_guard<std::mutex> lk{mtx};
        for (size_t end = std::min(items.size(), i + chunk); i < end; ++i)
          wake = push(wal_entry(std::move(items[i])));
      }
      if (wake) cv.notify_one();
    }
  }

  /// Sends what a batch reports, once it is durable (or failed), but its revocations (deliver());
  /// the sessions told DURABLE go to `told`.
  void report(batch_report& r) {
    told.clear();
    for (size_t i = 0; i < r.acks.size();) {
      size_t end = i;
      while (end < r.acks.size() && r.acks[end].session == r.acks[i].session)
        ++end;
      std::vector<proto::position> pos;
      pos.reserve(end - i);
      for (size_t k = i; k < end; ++k)
        pos.push_back(r.acks[k].pos);
      told.push_back(r.acks[i].session);
      sink->on_durable(r.acks[i].session, std::move(pos));
      i = end;
    }
    if (!r.grants.empty()) sink->on_granted(std::move(r.grants));
    for (auto& [session, sh, epoch] : r.io_failed)
      sink->on_io_failed(session, shard_id{sh}, epoch, r.failure);
  }

  // -- the writer loop ------------------------------------------------------------------------

  // Who commits: whichever thread finds work queued and nobody committing takes the role
  // (`committing`) and keeps it until the queue is empty: the writer thread, woken by submit(),
  // or an I/O thread through commit() after it enqueued what it read (no hand-off at all: the
  // thread that read an APPEND writes it, syncs it and sends its DURABLE). One committer at a
  // time, so the sink's callbacks keep their order.
  void run() {
    std::vector<wal_entry> work, done;
    for (;;) {
      {
        std::unique_lock<std::mutex> lk{mtx};
        if ((queue.empty() || committing) && !stopping) {
          sleeping = true;
          bool woken = cv.wait_for(lk, std::chrono::nanoseconds(place_check_ns),
                                   [&] { return (!queue.empty() && !committing) || stopping; });
          sleeping = false;
          if (!woken) {  // idle for a second: is the data dir still there? (as the committer)
            if (committing || broken) continue;
            committing = true;
            lk.unlock();
            in_place(true);
            lk.lock();
            committing = false;  // what an I/O thread queued meanwhile is taken below
          }
        }
        if (stopping) cv.wait(lk, [&] { return !committing; });  // an I/O thread finishes
        if (queue.empty() && stopping) return;
        if (queue.empty() || committing) continue;
        committing = true;
      }
      commit_loop(work, done, true);
    }
  }

  /// Commits batch after batch while entries are queued; the caller holds the committer role,
  /// which ends here. A batch's report waits until the next batch's write has begun (the disk
  /// works on it while the answers go out) or, if nothing more is queued, goes out at once.
  /// `work` and `done` are the caller's buffers (empty): the batch being made and the one whose
  /// report is owed.
  void commit_loop(std::vector<wal_entry>& work, std::vector<wal_entry>& done, bool writer_thread) {
    // Both reports are empty here (the last role holder delivered and cleared what it owed).
    batch_report* owed = &report_a;
    batch_report* next = &report_b;
    bool owing = false;
    for (;;) {
      bool ended = false;
      {
        std::lock_guard<std::mutex> lk{mtx};
        if (!queue.empty()) {
          take_batch(work);
          appends_hold.taken();
        } else if (!owing) {
          committing = false;
          appends_hold.arm(told, now_ns(), last_commit_ns);
          told.clear();
          release_if_large(queue);  // empty: a burst (a million revocations) leaves its capacity
          if (stopping) cv.notify_all();
          ended = true;
        }
      }
      if (ended) {  // both empty, the caller's to keep: not the burst's size, though
        release_if_large(work);
        release_if_large(done);
        return;
      }
      // The last batch reports now if nothing more came; if it has checkpoints, loads or reads,
      // which must see the log as it was when they were queued (not the next batch's
      // admissions); or if it sends fewer than two frames: one send hidden behind the next write
      // saves that batch less than its wait for the write costs the one session waiting.
      if (owing && (work.empty() || !owed->after_commit.empty() || frames_of(*owed) < 2)) {
        deliver(*owed, done);
        owing = false;
        if (work.empty()) continue;
      }
      auto batches = n_batches.load(std::memory_order_relaxed);
      process(work, *next, owing ? owed : nullptr, done);  // delivers (and clears) *owed
      if (!writer_thread)
        n_batches_inline.fetch_add(n_batches.load(std::memory_order_relaxed) - batches,
                                   std::memory_order_relaxed);
      std::swap(owed, next);
      owing = true;
      work.swap(done);  // `done` was emptied when its report went out
    }
  }

  /// Moves what is queued into `work` (empty), under mtx: all of it, or, if its appends hold
  /// more than the batch's limit, the entries up to the first that reaches it; the rest stays
  /// queued, first in line for the next batch. (A batch's length is a u32 on disk.)
  void take_batch(std::vector<wal_entry>& work) {
    uint64_t limit = std::min(opts.batch_appends_bytes, max_batch_appends_bytes);
    if (queued_bytes <= limit) {
      work.swap(queue);
      queued_others = 0;
      queued_bytes = 0;
    } else {
      uint64_t taken = 0;
      size_t n = 0;
      while (n < queue.size() && (n == 0 || taken < limit)) {  // at least one entry
        if (auto* a = std::get_if<wal_append>(&queue[n]))
          taken += batch_bytes_of(*a);
        else
          queued_others--;
        ++n;
      }
      work.assign(std::make_move_iterator(queue.begin()),
                  std::make_move_iterator(queue.begin() + static_cast<std::ptrdiff_t>(n)));
      queue.erase(queue.begin(), queue.begin() + static_cast<std::ptrdiff_t>(n));
      queued_bytes -= taken;
    }
    queued.store(queue.size(), std::memory_order_release);
  }

  /// The frames a report sends to sessions (DURABLE, one per session of the settled `acks`;
  /// IO_FAILED).
  static size_t frames_of(const batch_report& r) {
    size_t sessions = 0;
    for (size_t i = 0; i < r.acks.size(); ++i)
      if (i == 0 || r.acks[i].session != r.acks[i - 1].session) ++sessions;
    return sessions + r.io_failed.size();
  }

  /// Reports batch `r` (durable or failed), then serves its checkpoints, loads and reads, which
  /// point into `entries`, then reports its revocations (each answered once everything queued
  /// before it is durable or refused: a checkpoint queued before it included; with the log's
  /// failure once it failed, in this batch or before); empties both.
  void deliver(batch_report& r, std::vector<wal_entry>& entries) {
    report(r);
    for (auto* e : r.after_commit)
      serve_after_commit(*e);
    if (!r.revokes.empty()) sink->on_revoked(std::move(r.revokes), broken ? broken_reason : "");
    r.clear();
    entries.clear();
  }

  /// A grant that needs nothing written, made on the calling thread when the log is idle: the
  /// caller takes the committer role for that long (no I/O: it never blocks but on the queue's
  /// lock), so the grant is ordered with everything else as a batch of its own would be, and
  /// reported before this returns. False, with nothing done, if another thread commits, anything
  /// is queued, or the grant must wait or write (process() then makes it).
  bool grant_at_once(uint64_t token, session_id session, shard_id shard) {
    {
      std::lock_guard<std::mutex> lk{mtx};
      if (committing || !queue.empty() || stopping) return false;
      committing = true;
    }
    bool made = false;
    uint32_t s = shard.value();
    if (!check_shard(s)) {
      uint64_t epoch = current_epoch(shards[s]).value() + 1;
      // As process() decides a lone grant, and with no reservation block due (it would be written).
      if (settled(shards[s], epoch) && !reservation_due(std::max(max_granted, epoch))) {
        n_early_grants.fetch_add(1, std::memory_order_relaxed);
        sink->on_granted({hold(s, token, session, epoch)});
        made = true;
      }
    }
    bool wake;
    {
      std::lock_guard<std::mutex> lk{mtx};
      committing = false;
      // An I/O thread queued meanwhile and left it to us, or stop() waits for the role.
      wake = (sleeping && !queue.empty()) || stopping;
    }
    if (wake) cv.notify_all();
    return made;
  }

  // -- grants -----------------------------------------------------------------------------------

  /// A grant of `epoch` for `st` need not wait for anything of its own: the epoch is within the
  /// reservation on disk and nothing of the shard waits to be durable (the LEASE names a durable
  /// LSN). After a restart every grant is above the reservation anyway.
  bool settled(const shard_log& st, uint64_t epoch) const {
    return epoch <= reserved && st.last_lsn == st.durable_lsn;
  }
  /// With epochs up to `granted` given out, the next reservation block is due (written ahead,
  /// with a batch, once half of the current one is used).
  bool reservation_due(uint64_t granted) const {
    return granted > 0 && granted + reserve_block / 2 > reserved;
  }
  /// Makes `session` the holder of shard `s` under `epoch` (the shard's next).
  grant_done hold(uint32_t s, uint64_t token, session_id session, uint64_t epoch) {
    auto& st = shards[s];
    st.epoch = epoch_t{epoch};
    st.holder = session;
    st.granted_lsn = st.last_lsn;
    max_granted = std::max(max_granted, epoch);
    return grant_done{token, session, s, epoch, st.last_lsn};
  }

  // -- admission ------------------------------------------------------------------------------

  /// The shard's last epoch that may have been granted: after a restart, any up to the floor.
  epoch_t current_epoch(const shard_log& st) const {
    return epoch_t{std::max(st.epoch.value(), epoch_floor)};
  }

  std::optional<proto::error> check_shard(uint32_t shard) const {
    if (shard >= shards.size()) return unknown_shard(shard, shards.size());
    if (broken)
      return proto::error{err_code::io, "the log failed earlier (" + broken_reason +
                                            "); appends are refused until restart"};
    return std::nullopt;
  }

  /// The shard's state if `session` holds `shard` under `epoch` (and, to write, the log still
  /// works); otherwise the request is refused (to the session) and nullptr returned. The holder
  /// is checked first (PROTOCOL.md §3), then the log; reads of durable data are served even
  /// after a write failure.
  shard_log* admit(session_id session, uint64_t request_id, shard_id shard, epoch_t epoch,
                   bool to_write = true) {
    uint32_t s = shard.value();
    std::optional<proto::error> err;
    if (s >= shards.size()) {
      err = unknown_shard(s, shards.size());
    } else {
      auto& st = shards[s];
      err = refuse_shard_request(s, epoch, current_epoch(st), st.holder != 0,
                                 st.holder == session && session != 0);
      if (!err && to_write) err = check_shard(s);
    }
    if (err) {
      refuse(session, request_id, *err);
      return nullptr;
    }
    return &shards[s];
  }

  // -- one batch ------------------------------------------------------------------------------

  /// Writes everything queued as one batch (group commit) and fills in what it reports;
  /// checkpoints, loads and reads are left in `r.after_commit`, to be served after the report, so
  /// they see every record queued before them. The batch before it, durable, whose report is
  /// `owed` (entries in `owed_entries`), is delivered once this batch's write has begun and before
  /// it is synced, and before anything of this batch is reported (its refusals and the grants
  /// that need nothing written).
  void process(std::vector<wal_entry>& work, batch_report& r, batch_report* owed,
               std::vector<wal_entry>& owed_entries) {
    // The writer has taken these appends: they no longer wait in its queue (before any answer
    // goes out, so a connection told DURABLE never finds its count stale).
    for (auto& e : work)
      if (auto* a = std::get_if<wal_append>(&e); a != nullptr && a->in_flight)
        a->in_flight->fetch_sub(1, std::memory_order_release);
    auto& body = batch_body;
    body.clear();
    auto& new_sections = batch_sections;
    new_sections.clear();
    struct release_large {  // however process() ends
      impl& w;
      ~release_large() {
        release_if_large(w.batch_body);
        release_if_large(w.batch_sections);
        release_if_large(w.batch_touched);
        release_if_large(w.batch_section.records);
      }
    } release{*this};
    auto& acks = r.acks;
    auto& grants = r.grants;               // reported once the batch is durable
    std::vector<grant_done> early_grants;  // reported once it is written, before its sync
    auto& revokes = r.revokes;
    // Whether a shard was revoked earlier in this batch: indexed at the first question (only a
    // grant made without a write asks, and a batch of revocations alone never does; a batch of
    // appends does not even make the set).
    std::optional<std::unordered_set<uint32_t>> revoked_index;
    auto revoked_here = [&, indexed = size_t{0}](uint32_t s) mutable {
      if (revokes.empty()) return false;
      if (!revoked_index) revoked_index.emplace();
      for (; indexed < revokes.size(); ++indexed)
        revoked_index->insert(revokes[indexed].shard);
      return revoked_index->count(s) > 0;
    };
    auto& after_commit = r.after_commit;
    auto& touched = batch_touched;
    touched.clear();
    uint64_t records = 0;
    std::vector<refusal> refused;
    // The one point where the batch before is reported, then this batch's first answers.
    auto hand_over = [&] {
      if (owed) deliver(*owed, owed_entries);
      owed = nullptr;
      for (auto& x : refused)
        sink->on_refused(x.session, x.request_id, std::move(x.error));
      refused.clear();
      if (!early_grants.empty()) {
        n_early_grants.fetch_add(early_grants.size(), std::memory_order_relaxed);
        sink->on_granted(std::move(early_grants));
        early_grants.clear();
      }
    };

    held_refusals = &refused;
    struct stop_holding {
      std::vector<refusal>*& held;
      ~stop_holding() { held = nullptr; }
    } holding{held_refusals};  // never left pointing at `refused`, however process() ends
    for (auto& e : work) {
      if (auto* a = std::get_if<wal_append>(&e)) {
        uint32_t s = a->shard.value();
        auto* st = admit(a->session, a->request_id, a->shard, a->epoch);
        if (!st) continue;
        if (a->first_lsn.value() != st->last_lsn + 1) {
          refuse(a->session, a->request_id,
                 proto::error{err_code::lsn_gap, "shard " + std::to_string(s) +
                                                     ": first_lsn must be " +
                                                     std::to_string(st->last_lsn + 1) + ", not " +
                                                     std::to_string(a->first_lsn.value())});
          continue;
        }
        auto count = static_cast<uint32_t>(a->records.size());
        if (drop_acknowledged) {  // the test hook: acknowledged, not (all) written
          uint64_t first = a->first_lsn.value();
          uint32_t kept =
              drop_after < first
                  ? 0
                  : static_cast<uint32_t>(std::min<uint64_t>(count, drop_after - first + 1));
          if (kept == 0) {
            st->last_lsn += count;
            acks.push_back({a->session, s, {a->shard, a->epoch, lsn_t{st->last_lsn}}});
            continue;
          }
          st->last_lsn += count - kept;  // (the rest is added below as if all were written)
          a->records.views.resize(kept);
        }
        auto& sec = batch_section;
        sec.shard = s;
        sec.epoch = a->epoch.value();
        sec.first_lsn = a->first_lsn.value();
        sec.records.assign(a->records.views.begin(), a->records.views.end());
        size_t region = append_section(body, sec);
        uint32_t written = static_cast<uint32_t>(a->records.size());
        new_sections.push_back({s, section_ref{.first_lsn = a->first_lsn.value(),
                                               .count = written,
                                               .segment = 0,  // set once written
                                               .offset = region,
                                               .size = body.size() - region}});
        st->last_lsn += written;
        records += written;
        if (fail_sync_at_lsn != 0 && st->last_lsn >= fail_sync_at_lsn && !failed_sync_at_lsn) {
          failed_sync_at_lsn = true;  // the test hook
          inject_sync_failure = true;
        }
        n_appends.fetch_add(1, std::memory_order_relaxed);
        acks.push_back({a->session, s, {a->shard, a->epoch, lsn_t{st->last_lsn}}});
        touched.emplace_back(a->session, s, a->epoch.value());
      } else if (auto* g = std::get_if<wal_grant>(&e)) {
        uint32_t s = g->shard.value();
        if (check_shard(s)) {
          grants.push_back({g->token, g->session, s, 0, 0});
          continue;
        }
        uint64_t epoch = current_epoch(shards[s]).value() + 1;
        auto done = hold(s, g->token, g->session, epoch);
        // Settled (and no revocation of the shard in this batch, which waits for its records):
        // reported now, and no record of it is written.
        if (settled(shards[s], epoch) && !revoked_here(s)) {
          early_grants.push_back(done);
        } else {
          append_section(body, grant_section{s, epoch});
          grants.push_back(done);
        }
      } else if (auto* rv = std::get_if<wal_revoke>(&e)) {
        uint32_t s = rv->shard.value();
        bool wrote = true;
        if (s < shards.size()) {
          auto& st = shards[s];
          if (st.epoch == rv->epoch && (rv->holder == 0 || st.holder == rv->holder)) st.holder = 0;
          if (st.epoch == rv->epoch) wrote = st.last_lsn != st.granted_lsn;
        }
        revokes.push_back(revocation_done{rv->token, s, wrote});
      } else if (admitted_after_commit(e)) {
        after_commit.push_back(&e);
      }
    }

    held_refusals = nullptr;
    r.settle();

    uint64_t reserving = 0;
    if (!broken && reservation_due(max_granted)) {  // a broken log writes nothing more
      reserving = max_granted + reserve_block;
      append_section(body, reserve_section{reserving});
    }

    if (body.empty()) {
      hand_over();
    } else {
      if (inject_failure.exchange(false)) segments.fail_next_append();
      if (inject_sync_failure.exchange(false)) segments.fail_next_sync();
      auto t0 = std::chrono::steady_clock::now();
      auto written = segments.write(body, owed != nullptr);
      auto write_time = std::chrono::steady_clock::now() - t0;
      hand_over();
      if (written) {
        if (sync_delay.count() > 0) std::this_thread::sleep_for(sync_delay);
        t0 = std::chrono::steady_clock::now();
        if (auto synced = segments.sync_written(); !synced)
          written = synced.err();
        else
          n_fsyncs++;  // counted as it returns (a report sent before it sees the count without it)
      }
      if (!written) {
        // Nothing of this batch is acknowledged: its appends hear IO_FAILED (once per session and
        // shard, naming the epoch they were sent under), its grants were not made (epoch 0), its
        // revocations are reported with the failure (as every later one is: their shards get no
        // new holder, the log is broken until restart); its checkpoints are refused (the log
        // failed) and its loads and reads answered from what was durable before it.
        fail(written.err().message);
        r.failure = written.err().message;
        std::sort(touched.begin(), touched.end());
        touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
        for (auto& [session, sh, epoch] : touched)
          r.io_failed.emplace_back(session, sh, epoch_t{epoch});
        r.acks.clear();
        for (auto& g : grants)
          g.epoch = 0;
        return;
      }
      if (reserving > 0) reserved = reserving;
      auto commit_time = write_time + (std::chrono::steady_clock::now() - t0);
      last_commit_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(commit_time).count();
      fsync_seconds.observe(std::chrono::duration<double>(commit_time).count());
      records_per_fsync.observe(static_cast<double>(records));
      n_batches++;
      n_records += records;
      n_bytes.fetch_add(body.size(), std::memory_order_relaxed);
      for (auto& p : new_sections) {
        auto& st = shards[p.shard];
        p.ref.segment = segments.active().seq;
        p.ref.offset += *written;
        st.index.push_back(p.ref);
        st.durable_lsn = p.ref.first_lsn + p.ref.count - 1;
        durable[p.shard].store(st.durable_lsn, std::memory_order_relaxed);
        auto& m = segments.active().max_lsn[p.shard];
        m = std::max(m, st.durable_lsn);
      }
    }
    if (inject_spare_failure.load(std::memory_order_relaxed) &&
        inject_spare_failure.exchange(false))
      segments.fail_next_spare();  // (a test hook: a plain load on every commit)
    if (segments.spare_fill_failed()) publish_spare_failure(true);
    if (!broken && segments.full()) roll();  // a broken log writes nothing more
    if (!broken && now_ns() - place_checked_ns >= place_check_ns) in_place(true);
  }

  /// True while the data dir is where this server opened it (check_data_dir_lock) and, with
  /// `segments_too`, every segment still has its name (each batch's sync_written() looks at the
  /// active one's). Otherwise the log fails: a checkpoint makes and replaces files by name, which
  /// may now be another server's (segments are made in the wal/ directory opened at start, but a
  /// roll is stopped too), and the records of a deleted segment are gone at restart. Called by the
  /// committer, before a roll or checkpoint and about once a second.
  bool in_place(bool segments_too) {
    if (broken) return false;
    // (Only the whole check counts as the periodic one: a roll's or a checkpoint's, which skips
    // the segments, must not put it off; under load rolls come more than once a second.)
    if (segments_too) place_checked_ns = now_ns();
    auto r = check_data_dir_lock(dir_lock, opts.dir);
    if (r && segments_too) r = segments.check_linked();
    if (r) return true;
    fail(r.err().message);
    return false;
  }

  /// The spare's failures for get_stats; `early`: found before its roll, which is told too.
  void publish_spare_failure(bool early) {
    if (segments.spare_failures() == n_spare_failures.load(std::memory_order_relaxed)) return;
    {
      std::lock_guard<std::mutex> lk{failure_mtx};
      spare_failure_text = segments.spare_failure();
      n_spare_failures = segments.spare_failures();
    }
    if (early)
      spdlog::warn("the next log segment could not be prepared ({}); the log goes on, and its "
                   "next roll tries again, which fails the log if it cannot (free space now)",
                   segments.spare_failure());
  }

  /// A new segment, starting with a snapshot of every shard that has state.
  void roll() {
    if (!in_place(false)) return;
    auto t0 = std::chrono::steady_clock::now();
    auto r = inject_roll_failure.exchange(false)
                 ? proto::result<void>{proto::error{
                       err_code::io, "roll to a new segment: Input/output error (injected)"}}
                 : segments.roll(snapshot_of(shards), reserve_section{reserved});
    publish_spare_failure(false);  // (a failed roll counts it too)
    if (!r) {
      fail(r.err().message);
      return;
    }
    n_batches++;  // the snapshot batch
    n_fsyncs++;
    n_segments = segments.count();
    roll_seconds.observe(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  /// A write, fdatasync or roll failed, or the data dir is no longer in place (in_place()): every
  /// later append is refused, and the sink is told (once; what the failed batch reports is its
  /// caller's business).
  void fail(const std::string& err) {
    bool first = !broken;
    broken = true;
    broken_reason = err;
    {
      std::lock_guard<std::mutex> lk{failure_mtx};
      failure_text = err;
    }
    failed = true;
    for (auto& st : shards)
      st.last_lsn = st.durable_lsn;
    if (!first) return;
    spdlog::error("the log failed: it refuses every append and grant until restart reason={}",
                  logging::quoted(err));
    sink->on_failed(err);  // once failure() says so too (/healthz)
  }

  // -- after the batch: checkpoints, loads, reads ---------------------------------------------

  /// A checkpoint, load or read is checked against the leases where it stands in the batch (a
  /// revocation or grant queued after it must not refuse it); false: refused. It is served once
  /// the batch is durable (or failed), without a second look at the lease.
  bool admitted_after_commit(const wal_entry& e) {
    if (auto* c = std::get_if<wal_checkpoint>(&e))
      return admit(c->session, c->request_id, c->shard, c->epoch) != nullptr;
    if (auto* l = std::get_if<wal_load_checkpoint>(&e))
      return admit(l->session, l->request_id, l->shard, l->epoch, false) != nullptr;
    auto& r = std::get<wal_read>(e);
    return admit(r.session, r.request_id, r.shard, r.epoch, false) != nullptr;
  }

  void serve_after_commit(wal_entry& e) {
    if (auto* c = std::get_if<wal_checkpoint>(&e))
      serve_checkpoint(*c);
    else if (auto* l = std::get_if<wal_load_checkpoint>(&e))
      serve_load(*l);
    else if (auto* r = std::get_if<wal_read>(&e))
      serve_read(*r);
  }

  void serve_checkpoint(const wal_checkpoint& c) {
    in_place(false);                                // (if not, the log fails and it is refused)
    if (auto err = check_shard(c.shard.value())) {  // the log failed since it was admitted
      refuse(c.session, c.request_id, *err);
      return;
    }
    auto* st = &shards[c.shard.value()];
    if (c.lsn.value() > st->durable_lsn) {
      refuse(c.session, c.request_id,
             proto::error{err_code::bad_body, "checkpoint lsn " + std::to_string(c.lsn.value()) +
                                                  " is past the shard's durable LSN " +
                                                  std::to_string(st->durable_lsn)});
      return;
    }
    if (c.lsn.value() < st->ckpt_lsn) {  // its records may be retired: it would not recover them
      refuse(c.session, c.request_id,
             proto::error{err_code::bad_body, "checkpoint lsn " + std::to_string(c.lsn.value()) +
                                                  " is below the shard's checkpoint at LSN " +
                                                  std::to_string(st->ckpt_lsn) +
                                                  " (a checkpoint never goes back)"});
      return;
    }
    if (auto r = checkpoints.write(c.shard.value(), c.lsn.value(), c.data); !r) {
      n_checkpoint_failures.fetch_add(1, std::memory_order_relaxed);
      {
        std::lock_guard<std::mutex> lk{failure_mtx};
        checkpoint_failure_text = r.err().message;
      }
      checkpoint_warnings.warn("checkpoint", "a checkpoint could not be stored (" +
                                                 r.err().message +
                                                 "); its worker tries again, and no segment is "
                                                 "retired meanwhile shard=" +
                                                 std::to_string(c.shard.value()));
      refuse(c.session, c.request_id, r.err());
      return;
    }
    n_fsyncs += 2;
    n_checkpoints.fetch_add(1, std::memory_order_relaxed);
    st->ckpt_lsn = c.lsn.value();
    retire();  // before the OK, so a caller that saw the OK sees the segments gone
    sink->on_answer(c.session, proto::ok{c.request_id, {}});
  }

  void serve_load(const wal_load_checkpoint& l) {
    // Read by name: not from a data dir that is no longer this server's (served after a write
    // failure otherwise, as what was durable is).
    if (auto placed = check_data_dir_lock(dir_lock, opts.dir); !placed) {
      if (!broken) fail(placed.err().message);
      refuse(l.session, l.request_id, placed.err());
      return;
    }
    auto c = checkpoints.read(l.shard.value());
    if (!c) {
      refuse(l.session, l.request_id, c.err());
      return;
    }
    proto::checkpoint_data out{l.request_id, lsn_t{0}, {}};
    if (*c) {
      out.lsn = lsn_t{(*c)->lsn};
      out.data = std::move((*c)->data);
    }
    sink->on_answer(l.session, std::move(out));
  }

  /// RECOVER_LOG: durable records after `after`, the first always, then while they fit
  /// (proto::batch_takes: in bytes, and in number for the reader's decoder).
  void serve_read(const wal_read& r) {
    uint32_t s = r.shard.value();
    auto* st = &shards[s];
    proto::log_page page{r.request_id, r.shard, lsn_t{r.after.value() + 1},
                         {},           0,       lsn_t{st->durable_lsn}};
    uint64_t want = r.after.value() + 1;
    if (want > st->durable_lsn) {
      sink->on_answer(r.session, std::move(page));
      return;
    }
    size_t at = st->index.find(want);
    if (at == st->index.size()) {
      uint64_t first = st->index.empty() ? st->durable_lsn + 1 : st->index.front().first_lsn;
      refuse(r.session, r.request_id,
             proto::error{err_code::bad_body,
                          "shard " + std::to_string(s) + ": records before LSN " +
                              std::to_string(first) +
                              " were retired after a checkpoint; load the checkpoint "
                              "and recover after its LSN"});
      return;
    }
    uint64_t limit = std::min<uint64_t>(r.max_bytes, opts.max_read_bytes);
    uint64_t total = 0;
    uint64_t lsn = want;
    for (bool full = false; at < st->index.size() && !full; ++at) {
      auto* sec = &st->index[at];
      auto region = segments.read(sec->segment, sec->offset, sec->size);
      auto recs = region ? decode_records(*region, sec->count) : region.err();
      if (!recs) {
        refuse(r.session, r.request_id,
               proto::error{err_code::io, "log of shard " + std::to_string(s) +
                                              " cannot be read: " + recs.err().message});
        return;
      }
      for (uint32_t i = 0; i < sec->count && !full; ++i) {
        uint64_t this_lsn = sec->first_lsn + i;
        if (this_lsn < lsn) continue;
        auto rec = (*recs)[i];
        if (!proto::batch_takes(page.records.size(), total, rec.size(), limit)) {
          full = true;
          break;
        }
        total += rec.size();
        page.records.emplace_back(rec.begin(), rec.end());
        lsn = this_lsn + 1;
      }
    }
    page.more = lsn <= st->durable_lsn ? 1 : 0;
    sink->on_answer(r.session, std::move(page));
  }

  /// Deletes the oldest segments whose every record is covered by its shard's checkpoint.
  void retire() {
    auto gone = segments.retire([&](const segment& seg) {
      for (auto& [s, max] : seg.max_lsn)
        if (max > shards[s].ckpt_lsn) return false;
      return true;
    });
    if (gone.empty()) return;
    uint64_t newest = gone.back();
    for (auto& st : shards)
      st.index.drop_through(newest);
    n_retired += gone.size();
    n_segments = segments.count();
  }
};

wal_writer::wal_writer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

wal_writer::~wal_writer() {
  stop();
}

proto::result<std::unique_ptr<wal_writer>> wal_writer::open(const wal_options& opts, wal_sink* sink,
                                                            wal_recovery_report* report) {
  auto log = recover(opts);
  if (!log) return log.err();
  if (report) *report = log->report;
  auto p = std::make_unique<impl>(opts, sink, std::move(*log));
  auto* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<wal_writer>(new wal_writer(std::move(p)));
}

void wal_writer::submit(wal_entry e) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk{impl_->mtx};
    wake = impl_->push(std::move(e));
  }
  if (wake) impl_->cv.notify_one();
}

void wal_writer::enqueue(wal_entry e) {
  std::lock_guard<std::mutex> lk{impl_->mtx};
  impl_->push(std::move(e));
}

std::chrono::nanoseconds wal_writer::commit() {
  {
    std::lock_guard<std::mutex> lk{impl_->mtx};
    if (impl_->committing || impl_->queue.empty()) return {};
    if (auto wait = impl_->appends_hold.hold_ns(now_ns(), impl_->queued_others == 0); wait > 0)
      return std::chrono::nanoseconds(wait);
    impl_->committing = true;
  }
  thread_local std::vector<wal_entry> work, done;
  impl_->commit_loop(work, done, false);
  return {};
}

void wal_writer::submit(std::vector<wal_entry> es) {
  impl_->push_all(es);
}

void wal_writer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lk{impl_->mtx};
    impl_->stopping = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

bool wal_writer::drops_acknowledged() const {
  return impl_->drop_acknowledged;
}

void wal_writer::inject_sync_failure() {
  impl_->inject_sync_failure = true;
}

void wal_writer::inject_roll_failure() {
  impl_->inject_roll_failure = true;
}

void wal_writer::inject_spare_failure() {
  impl_->inject_spare_failure = true;
}

void wal_writer::inject_write_failure() {
  impl_->inject_failure = true;
}

bool wal_writer::grant_at_once(uint64_t token, session_id session, shard_id shard) {
  return impl_->grant_at_once(token, session, shard);
}

void wal_writer::grant(uint64_t token, session_id session, shard_id shard) {
  submit(wal_grant{token, session, shard});
}

void wal_writer::revoke(std::vector<revocation> revocations) {
  impl_->push_all(revocations);
}

epoch_t wal_writer::recovered_epoch(shard_id s) const {
  return impl_->current_epoch(impl_->shards.at(s.value()));
}

lsn_t wal_writer::recovered_durable_lsn(shard_id s) const {
  return lsn_t{impl_->shards.at(s.value()).durable_lsn};
}

wal_writer::stats wal_writer::get_stats() const {
  auto& i = *impl_;
  stats s;
  s.batches = i.n_batches;
  s.records = i.n_records;
  s.fsyncs = i.n_fsyncs;
  s.segments = i.n_segments;
  s.retired_segments = i.n_retired;
  s.appends = i.n_appends;
  s.refused = i.n_refused;
  s.bytes_written = i.n_bytes;
  s.queued = i.queued.load(std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lk{i.mtx};
    s.committing = i.committing;
    s.writer_sleeping = i.sleeping;
    s.holds_met = i.appends_hold.met();
    s.holds_missed = i.appends_hold.missed();
  }
  s.checkpoints = i.n_checkpoints;
  s.grants_without_fsync = i.n_early_grants;
  s.batches_inline = i.n_batches_inline;
  s.failed = i.failed;
  {
    std::lock_guard<std::mutex> lk{i.failure_mtx};
    if (s.failed) s.failure = i.failure_text;
    s.spare_failures = i.n_spare_failures.load(std::memory_order_relaxed);
    s.spare_failure = i.spare_failure_text;
    s.checkpoint_failures = i.n_checkpoint_failures.load(std::memory_order_relaxed);
    s.checkpoint_failure = i.checkpoint_failure_text;
  }
  s.fsync_seconds = i.fsync_seconds.snapshot();
  s.records_per_fsync = i.records_per_fsync.snapshot();
  s.roll_seconds = i.roll_seconds.snapshot();
  return s;
}

std::string wal_writer::failure() const {
  if (!impl_->failed) return {};
  std::lock_guard<std::mutex> lk{impl_->failure_mtx};
  return impl_->failure_text;
}

uint64_t wal_writer::durable_lsn(uint32_t shard) const {
  if (shard >= impl_->shards.size()) return 0;
  return impl_->durable[shard].load(std::memory_order_relaxed);
}

}  // namespace fusee::server
