#include "actors/wal/recovery.hpp"

#include <algorithm>
#include <new>
#include <utility>

#include <fcntl.h>

#include "actors/wal/checkpoints.hpp"

namespace fusee::server::wal {

namespace {

proto::error refuse(std::string message) {
  return proto::error{proto::err_code::io, std::move(message)};
}

std::string at(const fs::path& path, size_t offset) {
  return path.string() + " at offset " + std::to_string(offset);
}

/// Checks fusee.meta against the configured shard count; writes it for a new data dir (one
/// without segments).
proto::result<void> check_meta(const wal_options& opts, size_t segments) {
  auto path = opts.dir / "fusee.meta";
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (segments > 0)
      return refuse(path.string() + " is missing, but " + (opts.dir / "wal").string() + " holds " +
                    std::to_string(segments) +
                    " segment(s): restore it (format=1 and the data dir's shard count) rather "
                    "than guess the shard count");
    auto text = encode(meta_file{format_version, opts.shards});
    return write_file_durably(path, proto::as_bytes(text));
  }
  auto all = read_file(path);
  if (!all) return all.err();
  auto meta =
      decode_meta(std::string_view{reinterpret_cast<const char*>(all->data()), all->size()});
  if (!meta) return refuse(path.string() + ": " + meta.err().message);
  if (meta->shards != opts.shards)
    return refuse("data dir " + opts.dir.string() + " was created with " +
                  std::to_string(meta->shards) + " shards; `shards` is " +
                  std::to_string(opts.shards) + ". The shard count is fixed per data dir.");
  return {};
}

/// The newest segment this log made (fusee.newest, written once each is in place) against those
/// found: if it is missing (deleted, or a copy made without it), its records, acknowledged, would
/// be lost without a word. No file: a log that has not rolled since fusee.newest came in, or
/// never made a segment.
proto::result<void> check_newest(const fs::path& wal_dir,
                                 const std::vector<std::pair<uint64_t, fs::path>>& segs) {
  auto path = newest_path(wal_dir);
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (!ec) return {};
    return refuse("cannot check " + path.string() + ": " + ec.message());
  }
  auto all = read_file(path);
  if (!all) return all.err();
  auto newest =
      decode_newest(std::string_view{reinterpret_cast<const char*>(all->data()), all->size()});
  if (!newest)
    return refuse(path.string() + ": " + newest.err().message +
                  ". It only names the newest segment, so that a missing one is found: check "
                  "that " +
                  wal_dir.string() +
                  " holds every segment (seg-<16 hex>.wal, consecutive, up to the newest the log "
                  "made), then remove it to start");
  uint64_t found = segs.empty() ? 0 : segs.back().first;
  if (found >= newest->segment) return {};
  return refuse(
      (wal_dir / segment_name(newest->segment)).string() + ", the newest segment this log made (" +
      path.string() + "), is missing: " +
      (segs.empty() ? "there is no segment at all" : "the newest found is " + segment_name(found)) +
      ". Its acknowledged records would be lost: restore it (from where it went, or restore a "
      "backup of the whole data dir into an empty directory: a copy over this one keeps this "
      "file) rather than start without it.");
}

/// Each shard's checkpoint against its records in the log: records retired from the log are
/// covered by the checkpoint (retirement waits for that), and a checkpoint covers only records
/// the log had made durable. Either failing means files were removed, cut or swapped outside the
/// server (a segment, a checkpoint), and starting would lose acknowledged records silently.
proto::result<void> check_checkpoints(const std::vector<shard_log>& shards,
                                      const checkpoint_store& checkpoints) {
  for (uint32_t s = 0; s < shards.size(); ++s) {
    auto& st = shards[s];
    uint64_t first = st.index.empty() ? st.last_lsn + 1 : st.index.front().first_lsn;
    auto file = [&] { return checkpoints.path(s).string(); };  // (a refusal's only: 10^6 shards)
    if (st.ckpt_lsn + 1 < first)
      return refuse("shard " + std::to_string(s) + ": its records up to LSN " +
                    std::to_string(first - 1) + " are no longer in the log, and " +
                    (st.ckpt_lsn == 0
                         ? file() + " is missing"
                         : file() + " covers only up to LSN " + std::to_string(st.ckpt_lsn)) +
                    ": the shard's state would be lost (restore the checkpoint from a backup). "
                    "Refusing to start.");
    if (st.ckpt_lsn > st.last_lsn)
      return refuse("shard " + std::to_string(s) + ": " + file() + " covers up to LSN " +
                    std::to_string(st.ckpt_lsn) + ", but the log holds its records only up to " +
                    "LSN " + std::to_string(st.last_lsn) +
                    ": segments were removed or cut (or the checkpoint is not this shard's), "
                    "and acknowledged records may be lost. Refusing to start.");
  }
  return {};
}

/// The segment files in the wal dir, by seq; removes stale temporary files.
proto::result<std::vector<std::pair<uint64_t, fs::path>>> list_segments(const fs::path& dir) {
  std::vector<std::pair<uint64_t, fs::path>> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    auto name = it->path().filename().string();
    if (auto seq = parse_segment_name(name))
      out.emplace_back(*seq, it->path());
    else if (name.starts_with("seg-"))
      return refuse(it->path().string() +
                    ": not a segment name (seg-<16 lowercase hex digits>.wal); move it out of " +
                    dir.string() + " if it is not part of the log");
    else if (name.ends_with(".tmp") || name.ends_with(".prep")) {
      std::error_code stale;
      fs::remove(it->path(), stale);  // rewritten from scratch when needed
    }
  }
  if (ec) return refuse("list " + dir.string() + ": " + ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

/// True if a whole batch with a valid checksum that could have been written after the damage
/// starts after it: damage at `damaged` (below segment_header_size: the segment's header), where
/// batch `damaged_seq` was expected (0: unknown, any batch counts).
bool valid_batch_after(byte_view data, size_t damaged, uint64_t damaged_seq) {
  // With the header damaged, the expected batch itself may be intact after it.
  bool header = damaged < segment_header_size;
  size_t base = header ? segment_header_size : damaged;
  uint64_t lowest = header ? damaged_seq : damaged_seq + 1;
  for (size_t p = std::max(damaged + 1, base); p + batch_header_size <= data.size(); ++p) {
    if (!std::equal(batch_magic.begin(), batch_magic.end(),
                    data.begin() + static_cast<ptrdiff_t>(p)))
      continue;
    auto h = decode_batch_header(data.subspan(p));
    if (!h || h->len > data.size() - p - batch_header_size ||
        !batch_checksum_ok(*h, data.subspan(p + batch_header_size, h->len)))
      continue;
    // A batch written after the damage has a seq from `lowest` on, and no further on than the
    // batches that fit before it (each takes a header at least). Another one, a batch's bytes
    // inside a record, say, is not evidence.
    if (damaged_seq == 0 ||
        (h->seq >= lowest && h->seq - damaged_seq <= (p - base) / batch_header_size))
      return true;
  }
  return false;
}

struct scanner {
  const wal_options& opts;
  recovered_log& log;
  uint64_t next_batch_seq = 0;  ///< 0: the chain is not known yet
  uint32_t prev_crc = 0;
  uint64_t extent = 0;  ///< the scanned segment's size when it was made (0: not recorded)
  /// An older segment cut short at the end of a batch: nothing was lost only if the next
  /// segment's first batch follows its last (the chain), which its scan confirms (reported then)
  /// or refutes (refused).
  std::string cut_pending{};

  proto::result<void> apply(const section& s, uint64_t seg_seq, uint64_t body_at, byte_view body) {
    auto bad_shard = [&](uint32_t shard) {
      return refuse("section for shard " + std::to_string(shard) + " of a log with " +
                    std::to_string(log.shards.size()) + " shards");
    };
    if (auto* r = std::get_if<records_section>(&s)) {
      if (r->shard >= log.shards.size()) return bad_shard(r->shard);
      auto& st = log.shards[r->shard];
      auto count = static_cast<uint32_t>(r->records.size());
      if (count == 0) return {};
      uint64_t offset = body_at + static_cast<uint64_t>(r->region.data() - body.data());
      st.index.push_back(section_ref{.first_lsn = r->first_lsn,
                                     .count = count,
                                     .segment = seg_seq,
                                     .offset = offset,
                                     .size = r->region.size()});
      st.last_lsn = r->first_lsn + count - 1;
      auto& m = log.segments.active().max_lsn[r->shard];
      m = std::max(m, st.last_lsn);
      log.report.records += count;
    } else if (auto* g = std::get_if<grant_section>(&s)) {
      if (g->shard >= log.shards.size()) return bad_shard(g->shard);
      auto& st = log.shards[g->shard];
      st.epoch = std::max(st.epoch, proto::epoch_t{g->epoch});
    } else if (auto* snap = std::get_if<snapshot_section>(&s)) {
      for (auto& e : snap->shards) {
        if (e.shard >= log.shards.size()) return bad_shard(e.shard);
        auto& st = log.shards[e.shard];
        st.epoch = std::max(st.epoch, proto::epoch_t{e.epoch});
        st.last_lsn = std::max(st.last_lsn, e.last_lsn);
      }
    } else if (auto* res = std::get_if<reserve_section>(&s)) {
      log.epoch_reserved = std::max(log.epoch_reserved, res->epoch);
    } else if (auto* e = std::get_if<extent_section>(&s)) {
      extent = e->bytes;
    }
    return {};
  }

  /// Scans one segment; on the last segment a torn tail is cut off, elsewhere damage is fatal.
  proto::result<void> scan_segment(uint64_t seq, const fs::path& path, bool last) {
    auto f = file::open(path, O_RDWR);
    if (!f) return f.err();
    auto size = f->size(path);
    if (!size) return size.err();
    // A segment is at most its preallocated size (segment_mb <= 4096) plus the batch that
    // crossed it; anything far larger is not one of ours, and would not fit in memory.
    if (*size > 2 * std::max<uint64_t>(opts.segment_bytes, uint64_t{4096} << 20))
      return refuse(path.string() + ": " + std::to_string(*size) +
                    " bytes, larger than any segment this server writes; not a segment of this "
                    "log?");
    bytes data;
    try {
      data.resize(*size);
    } catch (const std::bad_alloc&) {
      return refuse(path.string() + ": " + std::to_string(*size) + " bytes do not fit in memory");
    }
    // A segment is made whole (its zeros, then its header) before it is put in place: one with
    // nothing after its header was cut or emptied outside the server, and its first batch (the
    // extent that would tell how much the cut took) is gone with what else it held.
    if (*size <= segment_header_size)
      return refuse(path.string() + ": " + std::to_string(*size) +
                    " bytes, nothing after its header; the log puts a segment in place only "
                    "once it is made at its full size, so it was cut or emptied outside the "
                    "server, and acknowledged records may be lost. Refusing to start.");
    if (auto r = f->read_at(data, 0, path); !r) return r;
    auto& seg = log.segments.add(seq, std::move(*f), 0);

    size_t pos = 0;
    std::string problem;
    extent = 0;
    auto header = decode_segment_header(data);
    if (!header) {
      problem = "segment header missing or damaged (" + header.err().message + ")";
    } else if (header->seq != seq) {
      return refuse(path.string() + ": its header says segment " + std::to_string(header->seq));
    } else {
      pos = segment_header_size;
    }
    while (problem.empty() && pos < data.size()) {
      byte_view rest = byte_view{data}.subspan(pos);
      auto h = decode_batch_header(rest);
      if (!h) {
        problem = rest.size() < batch_header_size ? "partial batch header" : h.err().message;
        break;
      }
      if (rest.size() - batch_header_size < h->len) {
        problem = "partial batch body";
        break;
      }
      auto body = rest.subspan(batch_header_size, h->len);
      if (!batch_checksum_ok(*h, body)) {
        problem = "batch checksum mismatch";
        break;
      }
      // The chain runs across segments; only the oldest batch on disk starts it (older segments
      // are retired oldest first, so nothing is missing before it).
      if (next_batch_seq != 0 && (h->seq != next_batch_seq || h->prev_crc != prev_crc))
        return refuse(at(path, pos) + ": batch " + std::to_string(h->seq) +
                      " does not follow batch " + std::to_string(next_batch_seq - 1) +
                      " (sequence or chain checksum); a batch or a segment is missing, or the "
                      "file is not this log's. Refusing to start.");
      if (!cut_pending.empty())  // the chain goes on from the older segment's last batch
        log.report.cut_short.push_back(std::exchange(cut_pending, {}) +
                                       "; the next segment goes on from its last batch");
      auto sections = decode_sections(body);
      if (!sections)
        return refuse(at(path, pos) +
                      ": checksummed batch does not parse: " + sections.err().message);
      for (auto& s : *sections)
        if (auto r = apply(s, seq, pos + batch_header_size, body); !r)
          return refuse(at(path, pos) + ": " + r.err().message);
      next_batch_seq = h->seq + 1;
      prev_crc = h->crc;
      log.report.batches++;
      pos += batch_header_size + h->len;
    }
    if (!cut_pending.empty())  // no batch of this segment showed the chain going on
      return refuse(cut_pending +
                    "; a crash never shortens a segment, so it was cut short at the end of a "
                    "batch, and " +
                    path.string() +
                    " has no whole batch to show that none is missing after it: acknowledged "
                    "records may be lost. Refusing to start.");
    // Segments are preallocated with zeros: zeros after the last batch are its clean end.
    if (!problem.empty() && pos >= segment_header_size &&
        std::all_of(data.begin() + static_cast<ptrdiff_t>(pos), data.end(),
                    [](uint8_t b) { return b == 0; }))
      problem.clear();
    // Segments are made at their full size and written in place, so a crash never shortens one:
    // a file shorter than its extent was cut, and what the cut took may have held acknowledged
    // batches unless zeros are left after the last batch (nothing is written after zeros) or a
    // later segment's chain goes on from it (checked when that segment is scanned).
    if (extent > data.size()) {
      auto cut = path.string() + ": " + std::to_string(data.size()) +
                 " bytes, but the segment was made with " + std::to_string(extent);
      if (last && (!problem.empty() || pos == data.size()))
        return refuse(cut +
                      "; a crash never shortens a segment, so it was cut short, and no "
                      "zeros are left after its last batch (" +
                      (problem.empty() ? "it ends with one" : at(path, pos) + ": " + problem) +
                      "): acknowledged records may be lost. Refusing to start.");
      if (problem.empty()) {  // (an older segment's damage is refused below)
        if (last) {
          // Its zeros back, so that the batches written next do not end the file again (a
          // restart would take that for a cut that took batches).
          if (auto r = write_zeros(seg.f, data.size(), extent, path); !r) return r;
          if (auto r = seg.f.sync(path); !r) return r;
          log.report.cut_short.push_back(
              cut + "; only space after its last batch was cut (zeros restored)");
        } else if (pos < data.size()) {
          log.report.cut_short.push_back(cut + "; only space after its last batch was cut");
        } else {
          cut_pending = cut;
        }
      }
    }
    if (!problem.empty()) {
      if (!last)
        return refuse(at(path, pos) + ": " + problem +
                      "; this is not the last segment, so acknowledged records may be damaged. "
                      "Refusing to start.");
      if (valid_batch_after(data, pos, next_batch_seq))
        return refuse(at(path, pos) + ": " + problem +
                      ", and a valid batch follows: this is damage, not a torn write, so "
                      "acknowledged records may be lost. Refusing to start.");
      if (auto r = cut_torn_tail(seg, data, pos, problem); !r) return r;
      pos = std::max(pos, segment_header_size);
    }
    seg.size = pos;
    log.report.segments++;
    return {};
  }

  /// Zeroes the torn bytes (the space stays preallocated; the next scan ends there) and
  /// rewrites a damaged header.
  proto::result<void> cut_torn_tail(segment& seg, const bytes& data, size_t pos,
                                    const std::string& problem) {
    size_t end = data.size();
    while (end > pos && data[end - 1] == 0)
      --end;
    log.report.torn_bytes = end - pos;
    log.report.torn_reason = at(seg.path, pos) + ": " + problem;
    if (pos < segment_header_size) {
      if (auto r = seg.f.write_at(encode(segment_header{format_version, seg.seq}), 0, seg.path); !r)
        return r;
      pos = segment_header_size;
    }
    if (end > pos)
      if (auto r = seg.f.write_at(bytes(end - pos, 0), pos, seg.path); !r) return r;
    return seg.f.sync(seg.path);
  }
};

}  // namespace

proto::result<recovered_log> recover(const wal_options& opts) {
  auto wal_dir = opts.dir / "wal";
  checkpoint_store checkpoints{opts.dir / "checkpoints"};
  std::error_code ec;
  bool new_dir = !fs::exists(opts.dir, ec);
  // A data dir the log creates is the owner's only (an existing one keeps the operator's mode),
  // and so are wal/ and checkpoints/ whenever the log creates them (`mkdir -p data`, systemd's
  // StateDirectory= make the data dir first): their names say which shards hold records.
  std::vector<fs::path> made;
  if (new_dir) made.push_back(opts.dir);
  for (auto& d : {wal_dir, opts.dir / "checkpoints"})
    if (!fs::exists(d, ec)) made.push_back(d);
  fs::create_directories(wal_dir, ec);
  if (!ec) fs::create_directories(opts.dir / "checkpoints", ec);
  if (ec) return refuse("cannot create " + wal_dir.string() + ": " + ec.message());
  for (auto& d : made) {
    fs::permissions(d, fs::perms::owner_all, fs::perm_options::replace, ec);
    if (ec) return refuse("cannot restrict " + d.string() + " to its owner: " + ec.message());
  }
  // The data dir's own entry made durable too (wal/ and checkpoints/: the meta file's sync). Only
  // the last level of a new path is covered; its parents are the operator's.
  if (new_dir) {
    auto dir = fs::absolute(opts.dir, ec).lexically_normal();
    if (!dir.has_filename()) dir = dir.parent_path();  // "data/" and "data/." name "data"
    if (auto r = sync_dir(dir.parent_path()); !r) return r.err();
  }
  auto lock = lock_data_dir(opts.dir);  // before anything in it is read, removed or written
  if (!lock) return lock.err();
  auto segs = list_segments(wal_dir);
  if (!segs) return segs.err();
  if (auto r = check_meta(opts, segs->size()); !r) return r.err();
  if (auto r = check_newest(wal_dir, *segs); !r) return r.err();

  recovered_log log{std::vector<shard_log>(opts.shards),
                    0,
                    segment_set{wal_dir, opts.segment_bytes},
                    {},
                    std::move(*lock)};
  scanner scan{opts, log};
  for (size_t i = 0; i < segs->size(); ++i) {
    auto [seq, path] = (*segs)[i];
    if (i > 0 && seq != (*segs)[i - 1].first + 1)  // retirement removes the oldest only
      return refuse("segment " + segment_name((*segs)[i - 1].first + 1) + " is missing between " +
                    (*segs)[i - 1].second.string() + " and " + path.string() +
                    "; its records would be lost. Refusing to start.");
    if (auto r = scan.scan_segment(seq, path, i + 1 == segs->size()); !r) return r.err();
  }
  auto stored = checkpoints.stored(opts.shards);
  if (!stored) return stored.err();
  for (auto s : *stored) {
    auto c = checkpoints.read(s);
    if (!c) return c.err();
    if (*c) log.shards[s].ckpt_lsn = (*c)->lsn;
  }
  if (auto r = check_checkpoints(log.shards, checkpoints); !r) return r.err();
  if (auto r = log.segments.start(); !r) return r.err();
  log.segments.continue_chain(scan.next_batch_seq == 0 ? 1 : scan.next_batch_seq, scan.prev_crc);
  for (auto& st : log.shards)
    st.durable_lsn = st.last_lsn;
  if (log.segments.empty()) {
    if (auto r = log.segments.roll(snapshot_section{}); !r) return r.err();
  } else if (log.segments.active().size == segment_header_size) {
    // A crash between creating a segment and writing its snapshot: write it now, so the segment
    // stands alone once the ones before it are retired (its extent: the size it has now).
    auto& seg = log.segments.active();
    auto made = seg.f.size(seg.path);
    if (!made) return made.err();
    if (auto r = log.segments.append_snapshot(
            snapshot_of(log.shards), reserve_section{log.epoch_reserved}, extent_section{*made});
        !r)
      return r.err();
    log.report.batches++;
  }
  return log;
}

}  // namespace fusee::server::wal
