#include "actors/wal/segments.hpp"

#include <utility>

#include <fcntl.h>
#include <unistd.h>

namespace fusee::server::wal {

namespace {

fs::path spare_path(const fs::path& dir) {
  return dir / "next.prep";
}

// Files are made, renamed and removed in the directory the set opened (file::open_in), not by
// name: if the data dir was moved or replaced, another server's log may be where it was.

proto::result<void> rename_in(int dir, const fs::path& from, const fs::path& to) {
  int r = dir < 0 ? ::rename(from.c_str(), to.c_str())
                  : ::renameat(dir, from.filename().c_str(), dir, to.filename().c_str());
  if (r != 0) return io_error("rename", from);
  return {};
}

/// True if `path` is gone (also if it was gone already).
bool remove_in(int dir, const fs::path& path) {
  int r = dir < 0 ? ::unlink(path.c_str()) : ::unlinkat(dir, path.filename().c_str(), 0);
  return r == 0 || errno == ENOENT;
}

}  // namespace

proto::result<void> segment_set::sync_entries() const {
  return dir_file_ ? dir_file_.sync_all(dir_) : sync_dir(dir_);
}

segment_set::segment_set(fs::path dir, uint64_t segment_bytes)
    : dir_(std::move(dir)), segment_bytes_(segment_bytes) {}

proto::result<void> segment_set::start() {
  auto d = file::open(dir_, O_RDONLY | O_DIRECTORY);
  if (!d) return d.err();
  dir_file_ = std::move(*d);
  // The segments found are in place for good (a crash inside a roll may have left its rename
  // not yet durable), and then named newest, while the data dir is surely this server's (recovery
  // holds its lock): later rolls only overwrite that file in place.
  if (auto r = sync_entries(); !r) return r;
  if (!segments_.empty())
    if (auto r = note_newest(segments_.rbegin()->first); !r) return r;
  if (!spare_.valid()) prepare_spare();
  return {};
}

void segment_set::prepare_spare() {
  fill_ = std::make_shared<spare_fill>();
  fill_->active_used = segments_.empty() ? 0 : active().size;
  auto pace = [fill = fill_](uint64_t filled) {
    if (fill->abandon.load(std::memory_order_relaxed)) return fill_step::stop;
    // Behind the active segment (a log writing faster than the pace): no pauses, so the spare
    // is ready before the roll that needs it.
    if (fill->hurry.load(std::memory_order_relaxed) ||
        filled < fill->active_used.load(std::memory_order_relaxed))
      return fill_step::go_on;
    return fill_step::pause;
  };
  spare_ = std::async(std::launch::async, [path = spare_path(dir_), size = segment_bytes_, pace,
                                           fill = fill_, dir = in()] {
    auto f = create_zero_file(path, size, pace, dir);
    if (!f && !fill->abandon.load(std::memory_order_relaxed)) {
      fill->failure = f.err().message;
      fill->failed.store(true, std::memory_order_release);
    }
    return f;
  });
}

void segment_set::fail_next_spare() {
  fail_next_spare_ = true;
  fill_failure_injected_ = true;
}

void segment_set::count_fill_failure() {
  if (!fill_ || fill_->counted) return;
  bool injected = std::exchange(fill_failure_injected_, false);
  if (!injected && !fill_->failed.load(std::memory_order_acquire)) return;
  fill_->counted = true;
  spare_failures_++;
  spare_failure_ = injected ? injected_spare_failure().message : fill_->failure;
}

proto::error segment_set::injected_spare_failure() const {
  return proto::error{proto::err_code::io,
                      "zero-fill " + spare_path(dir_).string() + ": Input/output error (injected)"};
}

bool segment_set::spare_fill_failed() {
  auto before = spare_failures_;
  count_fill_failure();
  return spare_failures_ != before;
}

segment_set::~segment_set() {
  if (fill_) fill_->abandon = true;   // a part-filled spare is deleted at the next start
  if (spare_.valid()) spare_.wait();  // the background zero-filling writes into dir_
}

proto::result<void> segment_set::check_linked() const {
  if (dir_file_) {  // the directory too: wal/ moved or replaced leaves the segments their names
    auto named = dir_file_.named_by(dir_);
    if (!named) return named.err();
    if (*named != file::naming::same)
      return proto::error{
          proto::err_code::io,
          dir_.string() + " is no longer the directory this server opened (" +
              (*named == file::naming::gone ? "it is gone" : "another one is there") +
              ": was it moved, deleted or replaced while the server ran?). The log stops: a "
              "restart would not find its segments there. Stop this server, put it back and "
              "restart it"};
  }
  for (auto& [seq, s] : segments_)
    if (auto r = s.f.check_linked(s.path); !r) return r;
  return {};
}

segment& segment_set::add(uint64_t seq, file f, uint64_t size) {
  auto& s = segments_[seq];
  s.seq = seq;
  s.path = dir_ / segment_name(seq);
  s.f = std::move(f);
  s.size = size;
  return s;
}

void segment_set::continue_chain(uint64_t next_seq, uint32_t prev_crc) {
  next_batch_seq_ = next_seq;
  prev_crc_ = prev_crc;
}

proto::result<uint64_t> segment_set::append(byte_view body) {
  auto at = write(body);
  if (!at) return at.err();
  if (auto r = sync_written(); !r) return r.err();
  return *at;
}

proto::result<uint64_t> segment_set::write(byte_view body, bool start) {
  auto& seg = active();
  if (fail_next_) {
    fail_next_ = false;
    return proto::error{proto::err_code::io,
                        "write " + seg.path.string() + ": Input/output error (injected)"};
  }
  if (body.size() > max_batch_body)  // its length would not fit the header (the writer's cap)
    return proto::error{proto::err_code::io, "a batch of " + std::to_string(body.size()) +
                                                 " bytes exceeds the log format's limit of " +
                                                 std::to_string(max_batch_body)};
  auto& batch = batch_;
  encode_batch_into(batch, next_batch_seq_, prev_crc_, body);
  if (auto r = seg.f.write_at(batch, seg.size, seg.path); !r) {
    // What was written may reach the disk (and, with the preallocated zeros after it, parse as
    // the whole batch).
    erase_unsynced(seg, batch.size());
    return r.err();
  }
  if (start) seg.f.start_writeback(seg.size, batch.size());
  written_ = {batch.size(), decode_batch_header(batch)->crc};
  release_if_large(batch_);
  return seg.size + batch_header_size;
}

void segment_set::erase_unsynced(segment& seg, uint64_t size) {
  (void)seg.f.write_at(bytes(size, 0), seg.size, seg.path);
  (void)seg.f.sync(seg.path);
}

proto::result<void> segment_set::sync_written() {
  auto& seg = active();
  auto w = std::exchange(written_, {});
  auto synced = std::exchange(fail_next_sync_, false)
                    ? proto::result<void>{proto::error{proto::err_code::io,
                                                       "fdatasync " + seg.path.string() +
                                                           ": Input/output error (injected)"}}
                    : seg.f.sync(seg.path);
  // A segment deleted under the server (its data dir removed) takes its records with it at the
  // next restart: none of them may be acknowledged.
  if (synced) synced = seg.f.check_linked(seg.path);
  if (!synced) {
    erase_unsynced(seg, w.size);
    return synced.err();
  }
  seg.size += w.size;
  if (fill_) fill_->active_used.store(seg.size, std::memory_order_relaxed);
  next_batch_seq_++;
  prev_crc_ = w.crc;
  return {};
}

proto::result<void> segment_set::roll(const snapshot_section& snapshot, reserve_section reserve) {
  uint64_t seq = segments_.empty() ? 1 : segments_.rbegin()->first + 1;
  auto path = dir_ / segment_name(seq);
  auto prep = spare_path(dir_);
  if (fill_) fill_->hurry = true;  // the roll waits for the spare: no commits to give way to
  auto f = spare_.valid() ? spare_.get() : create_zero_file(prep, segment_bytes_, {}, in());
  if (std::exchange(fail_next_spare_, false))  // test hook (the filled file is closed here)
    f = injected_spare_failure();
  if (!f) {                           // the background fill failed: once more, now
    count_fill_failure();             // (unless spare_fill_failed() did)
    if (!fill_ || !fill_->counted) {  // no fill ran: this roll's own attempt failed
      spare_failures_++;
      spare_failure_ = f.err().message;
    }
    auto again = create_zero_file(prep, segment_bytes_, {}, in());
    if (!again)
      return proto::error{again.err().code, again.err().message + " (and in the background: " +
                                                f.err().message + ")"};
    f = std::move(again);
  }
  auto made = f->size(prep);  // its extent: recovery tells a file cut short by it
  if (!made) return made.err();
  if (auto r = f->write_at(encode(segment_header{format_version, seq}), 0, prep); !r) return r;
  if (auto r = f->sync(prep); !r) return r;
  if (auto r = rename_in(in(), prep, path); !r) return r;
  if (auto r = sync_entries(); !r) return r;
  if (auto r = note_newest(seq); !r) return r;  // once it is in place for good, never before
  add(seq, std::move(*f), segment_header_size);
  prepare_spare();  // after add(): the fill paces itself against the new segment's use
  // The snapshot (and the epoch reservation) make the segment self-sufficient for epochs and LSN
  // numbering.
  return append_snapshot(snapshot, reserve, extent_section{*made});
}

proto::result<void> segment_set::note_newest(uint64_t seq) {
  auto path = newest_path(dir_);
  auto text = encode(newest_file{seq});
  if (!newest_) {
    std::error_code ec;
    if (fs::exists(path, ec)) {
      auto f = file::open(path, O_RDWR);
      if (!f) return f.err();
      newest_ = std::move(*f);
    } else if (ec) {
      return proto::error{proto::err_code::io, "stat " + path.string() + ": " + ec.message()};
    }
  }
  if (newest_ && !newest_.check_linked(path)) newest_.close();  // deleted: made again below
  if (newest_) {  // the same length each time: one sector overwritten, no metadata to sync
    if (auto r = newest_.write_at(proto::as_bytes(text), 0, path); !r) return r;
    return newest_.sync(path);
  }
  if (auto r = write_file_durably(path, proto::as_bytes(text)); !r) return r;
  auto f = file::open(path, O_RDWR);
  if (!f) return f.err();
  newest_ = std::move(*f);
  return {};
}

proto::result<void> segment_set::append_snapshot(const snapshot_section& snapshot,
                                                 reserve_section reserve, extent_section extent) {
  bytes body;
  append_section(body, snapshot);
  if (reserve.epoch > 0) append_section(body, reserve);
  if (extent.bytes > 0) append_section(body, extent);
  auto r = append(body);
  if (!r) return r.err();
  return {};
}

proto::result<bytes> segment_set::read(uint64_t seq, uint64_t offset, uint64_t size) const {
  auto s = segments_.find(seq);
  if (s == segments_.end())
    return proto::error{proto::err_code::io, "segment " + segment_name(seq) + " is gone"};
  bytes out(size);
  if (auto r = s->second.f.read_at(out, offset, s->second.path); !r) return r.err();
  return out;
}

std::vector<uint64_t> segment_set::retire(const std::function<bool(const segment&)>& covered) {
  // Oldest first, each removal made durable before the next, and only while that works: the
  // segments on disk are always the newest, consecutive ones, so recovery can check the batch
  // chain across all of them. A removal not yet durable at a crash brings back only the oldest,
  // still consecutive, whose records the checkpoints cover.
  std::vector<uint64_t> gone;
  while (segments_.size() > 1 && covered(segments_.begin()->second)) {
    auto& oldest = segments_.begin()->second;
    if (!remove_in(in(), oldest.path)) break;  // kept; retried at the next checkpoint
    gone.push_back(oldest.seq);
    segments_.erase(segments_.begin());  // closes the file
    // Not durable yet: the next sync makes it so, with any later removal (until then a crash
    // brings back the oldest ones only, consecutive).
    if (!sync_entries()) break;
  }
  return gone;
}

}  // namespace fusee::server::wal
