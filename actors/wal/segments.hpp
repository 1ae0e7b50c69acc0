// The log's segment files, oldest first; the last is the active one, appended to. A segment is a
// preallocated zero-filled file (prepared in the background and kept open, so rolling to a new
// one needs no new file descriptor and, once the spare is ready, no zero-filling on the
// committing thread) with a header and checksummed batches chained across segments (format.hpp).
// Used by the committing thread and, before it starts, by recovery.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "actors/wal/file_io.hpp"
#include "actors/wal/format.hpp"

namespace fusee::server::wal {

struct segment {
  uint64_t seq = 0;
  fs::path path;
  file f;
  uint64_t size = 0;                               ///< bytes in use: the header and the batches
  std::unordered_map<uint32_t, uint64_t> max_lsn;  ///< per shard, for retirement
};

/// `<data_dir>`/fusee.newest for the segments in `wal_dir` (format.hpp): the newest segment made.
inline fs::path newest_path(const fs::path& wal_dir) {
  return wal_dir.parent_path() / "fusee.newest";
}

class segment_set {
public:
  segment_set(fs::path dir, uint64_t segment_bytes);
  /// Opens the directory (kept open to sync its entries), makes the segments found durable in it
  /// and names the newest (note_newest()), and starts preparing the next segment.
  proto::result<void> start();
  ~segment_set();
  segment_set(segment_set&&) = default;
  /// (No move assignment: the spare's fill uses the directory's descriptor, which it would close.)
  segment_set& operator=(segment_set&&) = delete;

  bool empty() const { return segments_.empty(); }
  size_t count() const { return segments_.size(); }
  segment& active() { return segments_.rbegin()->second; }
  /// Fails if a segment has no name left (file::check_linked): deleted while the server runs; or
  /// if the directory's path no longer names the directory opened at start().
  proto::result<void> check_linked() const;
  /// True once the active segment has passed its preallocated size.
  bool full() { return active().size > segment_bytes_; }

  /// Recovery: a segment found on disk, with `size` bytes in use.
  segment& add(uint64_t seq, file f, uint64_t size);
  /// Recovery: the batch chain continues after the last batch found.
  void continue_chain(uint64_t next_seq, uint32_t prev_crc);

  /// Appends one batch to the active segment and makes it durable; the body's file offset.
  /// (write() and then sync_written().)
  proto::result<uint64_t> append(byte_view body);
  /// Writes one batch after the last in the active segment, not yet durable; the body's file
  /// offset. If the write fails, what it wrote is overwritten with zeros (best effort). With
  /// `start`, the disk write begins now (the caller has other work before it syncs). The next batch
  /// follows it only once sync_written() made it durable.
  proto::result<uint64_t> write(byte_view body, bool start = false);
  /// Makes the batch write() wrote durable (fdatasync). Fails too if the segment was deleted
  /// (file::check_linked): a restart would not find its records. On failure the segment stays as if
  /// it was never written: its bytes, which writeback could still bring to the disk, are
  /// overwritten with zeros (best effort), so a restart does not recover records reported IO_FAILED
  /// (the log is broken then: nothing is appended after it).
  proto::result<void> sync_written();
  /// Appends a batch holding only `snapshot` and, if not 0, `reserve` and `extent` (the first
  /// batch of every segment).
  proto::result<void> append_snapshot(const snapshot_section& snapshot,
                                      reserve_section reserve = {}, extent_section extent = {});
  /// A new active segment: the spare zero-filled file gets a header and the snapshot batch as its
  /// first; the next spare is prepared in the background. Once the segment is in place,
  /// newest_path() names it.
  proto::result<void> roll(const snapshot_section& snapshot, reserve_section reserve = {});
  /// `size` bytes at `offset` of segment `seq`.
  proto::result<bytes> read(uint64_t seq, uint64_t offset, uint64_t size) const;
  /// Deletes the oldest segments while `covered` holds for them, never the active one; returns
  /// their seqs.
  std::vector<uint64_t> retire(const std::function<bool(const segment&)>& covered);

  /// Test hook: the next append fails as if the disk returned EIO.
  void fail_next_append() { fail_next_ = true; }
  /// Test hook: the next sync_written() fails after write() wrote, as if fdatasync returned EIO.
  void fail_next_sync() { fail_next_sync_ = true; }
  /// Test hook: the background zero-fill of the spare has failed (EIO), as the next look
  /// (spare_fill_failed) and the next roll find.
  void fail_next_spare();
  /// Background zero-fills that failed (a roll then filled the spare itself), and the last one's
  /// error: the roll's own try succeeded, so nothing else reports it.
  uint64_t spare_failures() const { return spare_failures_; }
  /// Looks whether the background fill of the spare has failed since the last look (one atomic
  /// load): true once per failure, which spare_failures() then counts, before the roll that will
  /// have to fill one itself (and fails the log if it cannot: a full disk, say).
  bool spare_fill_failed();
  const std::string& spare_failure() const { return spare_failure_; }

private:
  /// A batch whose write or fdatasync failed: its `size` bytes after the segment's end, which
  /// writeback could still bring to the disk, are overwritten with zeros (best effort), so a
  /// restart does not recover records reported IO_FAILED.
  void erase_unsynced(segment& seg, uint64_t size);
  /// fsync of the directory (its entries: new, renamed, removed segments).
  proto::result<void> sync_entries() const;
  /// newest_path() names segment `seq`, durably: overwritten in place (kept open; its text is the
  /// same length each time), made whole the first time if there is none (a new log's first
  /// roll, or a log from before it: at start(), while recovery holds the data dir's lock), and
  /// again if it was deleted meanwhile (by name: the writer checks the data dir first).
  proto::result<void> note_newest(uint64_t seq);
  /// The directory's descriptor, in which files are made, renamed and removed (file::open_in);
  /// -1 before start().
  int in() const { return dir_file_ ? dir_file_.fd() : -1; }

  fs::path dir_;
  uint64_t segment_bytes_;
  std::map<uint64_t, segment> segments_;
  uint64_t next_batch_seq_ = 1;
  bytes batch_;  ///< the batch write() writes, kept for its capacity
  uint32_t prev_crc_ = 0;
  struct written {
    uint64_t size = 0;  ///< the batch's bytes, header included; 0: none waits for its sync
    uint32_t crc = 0;
  } written_;
  file dir_file_;                           ///< the directory, for syncing its entries
  file newest_;                             ///< newest_path(), once note_newest() wrote it
  std::future<proto::result<file>> spare_;  ///< the next segment's file, being zero-filled
  /// What the spare's filling thread and the set share (create_zero_file's pace): the fill pauses
  /// between chunks while it is ahead of the active segment's use and nobody waits for it.
  struct spare_fill {
    std::atomic<bool> hurry{false};        ///< a roll waits for the spare: no more pauses
    std::atomic<bool> abandon{false};      ///< the set is going away: stop
    std::atomic<uint64_t> active_used{0};  ///< bytes in use in the active segment
    std::string failure;                   ///< why the fill failed (written before `failed`)
    std::atomic<bool> failed{false};       ///< the fill failed (the roll fills one itself)
    bool counted = false;                  ///< in spare_failures_ (the committer's)
  };
  /// Counts the running fill's failure once.
  void count_fill_failure();
  /// What fail_next_spare() makes the fill's failure.
  proto::error injected_spare_failure() const;
  std::shared_ptr<spare_fill> fill_;
  /// Starts filling the next spare on a thread of its own. Only while no fill runs (spare_ not
  /// valid: start() checks, roll() has taken the last one).
  void prepare_spare();
  bool fail_next_ = false;
  bool fail_next_sync_ = false;
  bool fail_next_spare_ = false;
  bool fill_failure_injected_ = false;  ///< fail_next_spare(): counted as the fill's failure
  uint64_t spare_failures_ = 0;
  std::string spare_failure_;
};

}  // namespace fusee::server::wal
