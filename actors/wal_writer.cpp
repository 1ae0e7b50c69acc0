#include "actors/wal_writer.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <sstream>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "actors/lease_rules.hpp"
#include "protocol/crc32c.hpp"
#include "protocol/frame.hpp"
#include "protocol/wire.hpp"

namespace fusee::server {

namespace fs = std::filesystem;
using proto::err_code;
using proto::reader;
using proto::writer;

namespace {

// On-disk format, version 1.
//   segment  = "FWAL" version:u32 seq:u64 batch*
//   batch    = "FWB1" len:u32 seq:u64 prev_crc:u32 crc:u32 body[len]
//              crc = CRC32C(len ++ seq ++ prev_crc ++ body); prev_crc chains batches
//   body     = section*
//   section  = 1 shard:u32 epoch:u64 first_lsn:u64 count:u32 (len:u32 bytes)*   records
//            | 2 shard:u32 epoch:u64                                            a lease grant
//            | 3 count:u32 (shard:u32 epoch:u64 last_lsn:u64)*                  segment snapshot
// Every segment starts with a snapshot of every shard that has state, so older segments can be
// retired once checkpoints cover their records.
constexpr uint8_t seg_magic[4] = {'F', 'W', 'A', 'L'};
constexpr uint8_t batch_magic[4] = {'F', 'W', 'B', '1'};
constexpr size_t seg_header_size = 16;
constexpr size_t batch_header_size = 24;
constexpr uint32_t format_version = 1;
constexpr uint8_t sec_records = 1, sec_grant = 2, sec_snapshot = 3;
constexpr uint8_t ckpt_magic[4] = {'F', 'C', 'K', '1'};

std::string errno_text(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

std::string seg_name(uint64_t seq) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "seg-%016llx.wal", static_cast<unsigned long long>(seq));
  return buf;
}

bool write_all(int fd, const uint8_t* p, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += w;
    n -= static_cast<size_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return true;
}

bool read_all(int fd, uint8_t* p, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
    off += static_cast<uint64_t>(r);
  }
  return true;
}

bool fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return false;
  bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

/// Writes `data` to `path` atomically and durably (temp file, fdatasync, rename, fsync dir).
bool write_file_durably(const fs::path& path, const bytes& data, std::string* err) {
  auto tmp = path;
  tmp += ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    *err = errno_text("open " + tmp.string());
    return false;
  }
  bool ok = write_all(fd, data.data(), data.size(), 0) && ::fdatasync(fd) == 0;
  if (!ok) *err = errno_text("write " + tmp.string());
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    *err = errno_text("rename " + tmp.string());
    ok = false;
  }
  if (ok && !fsync_dir(path.parent_path())) {
    *err = errno_text("fsync " + path.parent_path().string());
    ok = false;
  }
  return ok;
}

/// Creates `path` filled with `size` zero bytes and makes it durable. Writing into a file whose
/// blocks exist already lets fdatasync skip the metadata update an extending write needs: on the
/// development machine that is 175 us instead of 240 us per commit (docs/benchmarks.md).
std::string prepare_zero_file(const fs::path& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno_text("create " + path.string());
  bytes zeros(1 << 20, 0);
  std::string err;
  for (uint64_t off = 0; off < size && err.empty(); off += zeros.size()) {
    auto n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), size - off));
    if (!write_all(fd, zeros.data(), n, off)) err = errno_text("preallocate " + path.string());
  }
  if (err.empty() && ::fdatasync(fd) != 0) err = errno_text("fdatasync " + path.string());
  ::close(fd);
  return err;
}

bool all_zero(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0) return false;
  return true;
}

uint32_t batch_crc(uint32_t len, uint64_t seq, uint32_t prev, proto::byte_view body) {
  bytes head;
  writer w{head};
  w.u32(len);
  w.u64(seq);
  w.u32(prev);
  return proto::crc32c(body.data(), body.size(), proto::crc32c(head.data(), head.size()));
}

}  // namespace

/// Where one records section sits on disk.
struct section_ref {
  uint64_t first_lsn = 0;
  uint32_t count = 0;
  uint64_t segment = 0;
  uint64_t offset = 0;  ///< file offset of the first record's length
  uint64_t size = 0;    ///< bytes of the records region
};

struct shard_state {
  epoch_t epoch{};        ///< last granted
  session_id holder = 0;  ///< live lease, 0 = none
  uint64_t last_lsn = 0;  ///< last queued
  uint64_t durable_lsn = 0;
  uint64_t ckpt_lsn = 0;
  std::vector<section_ref> index;
};

struct segment {
  uint64_t seq = 0;
  int fd = -1;
  uint64_t size = 0;
  std::unordered_map<uint32_t, uint64_t> max_lsn;  ///< per shard, for retirement
};

struct wal_writer::impl {
  wal_options opts;
  wal_sink* sink = nullptr;
  fs::path wal_dir, ckpt_dir;
  std::vector<shard_state> shards;
  std::map<uint64_t, segment> segments;  ///< by seq; the last is active
  uint64_t next_batch_seq = 1;
  uint32_t prev_crc = 0;
  bool broken = false;
  std::string broken_reason;

  std::mutex mtx;
  std::condition_variable cv;
  std::vector<wal_entry> queue;
  std::atomic<size_t> queued{0};  ///< entries in `queue`, readable without the lock
  bool sleeping = false;          ///< the writer waits on `cv` (guarded by mtx)
  std::chrono::nanoseconds spin_budget{0};
  bool stopping = false;
  std::thread thread;

  std::future<std::string> spare;  ///< the next segment's file, being zero-filled
  std::atomic<bool> inject_failure{false};
  std::atomic<uint64_t> n_batches{0}, n_records{0}, n_fsyncs{0}, n_retired{0};

  ~impl() {
    for (auto& [seq, s] : segments)
      if (s.fd >= 0) ::close(s.fd);
  }

  segment& active() { return segments.rbegin()->second; }

  // -- recovery ---------------------------------------------------------------------------------

  bool check_meta(std::string* err) {
    auto meta = opts.dir / "fusee.meta";
    if (fs::exists(meta)) {
      std::ifstream in(meta);
      std::string line;
      uint64_t shards_found = 0, format = 0;
      while (std::getline(in, line)) {
        if (line.rfind("shards=", 0) == 0) shards_found = std::stoull(line.substr(7));
        if (line.rfind("format=", 0) == 0) format = std::stoull(line.substr(7));
      }
      if (format != format_version) {
        *err = meta.string() + ": unsupported data dir format " + std::to_string(format);
        return false;
      }
      if (shards_found != opts.shards) {
        *err = "data dir " + opts.dir.string() + " was created with " +
               std::to_string(shards_found) + " shards; `shards` is " +
               std::to_string(opts.shards) + ". The shard count is fixed per data dir.";
        return false;
      }
      return true;
    }
    std::string text = "format=" + std::to_string(format_version) +
                       "\nshards=" + std::to_string(opts.shards) + "\n";
    return write_file_durably(meta, bytes(text.begin(), text.end()), err);
  }

  bool apply_body(proto::byte_view body, uint64_t seg_seq, uint64_t body_offset,
                  wal_recovery_report* rep, std::string* err) {
    reader r{body};
    while (r.remaining() > 0) {
      uint8_t type = 0;
      r.u8(type, "section");
      if (type == sec_records) {
        uint32_t shard = 0, count = 0;
        uint64_t epoch = 0, first = 0;
        r.u32(shard, "shard");
        r.u64(epoch, "epoch");
        r.u64(first, "first_lsn");
        r.u32(count, "count");
        if (!r.ok() || shard >= shards.size()) {
          *err = "bad records section";
          return false;
        }
        section_ref ref{first, count, seg_seq, body_offset + r.offset(), 0};
        for (uint32_t i = 0; i < count; ++i) {
          uint32_t len = 0;
          if (!r.u32(len, "record") || !r.skip(len, "record")) {
            *err = "bad record length";
            return false;
          }
        }
        ref.size = body_offset + r.offset() - ref.offset;
        auto& st = shards[shard];
        st.index.push_back(ref);
        st.last_lsn = first + count - 1;
        auto& m = segments[seg_seq].max_lsn[shard];
        m = std::max(m, st.last_lsn);
        rep->records += count;
      } else if (type == sec_grant) {
        uint32_t shard = 0;
        uint64_t epoch = 0;
        r.u32(shard, "shard");
        r.u64(epoch, "epoch");
        if (!r.ok() || shard >= shards.size()) {
          *err = "bad grant section";
          return false;
        }
        shards[shard].epoch = std::max(shards[shard].epoch, epoch_t{epoch});
      } else if (type == sec_snapshot) {
        uint32_t count = 0;
        r.u32(count, "count");
        for (uint32_t i = 0; i < count && r.ok(); ++i) {
          uint32_t shard = 0;
          uint64_t epoch = 0, last = 0;
          r.u32(shard, "shard");
          r.u64(epoch, "epoch");
          r.u64(last, "last_lsn");
          if (shard >= shards.size()) {
            *err = "bad snapshot section";
            return false;
          }
          auto& st = shards[shard];
          st.epoch = std::max(st.epoch, epoch_t{epoch});
          st.last_lsn = std::max(st.last_lsn, last);
        }
        if (!r.ok()) {
          *err = "bad snapshot section";
          return false;
        }
      } else {
        *err = "unknown section type " + std::to_string(type);
        return false;
      }
    }
    return true;
  }

  /// Scans one segment; on the last segment a bad tail is cut off, elsewhere it is fatal.
  bool recover_segment(uint64_t seq, const fs::path& path, bool last, wal_recovery_report* rep,
                       std::string* err) {
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      *err = errno_text("open " + path.string());
      return false;
    }
    auto& seg = segments[seq];
    seg.seq = seq;
    seg.fd = fd;
    struct stat sb {};
    ::fstat(fd, &sb);
    bytes data(static_cast<size_t>(sb.st_size));
    if (!data.empty() && !read_all(fd, data.data(), data.size(), 0)) {
      *err = errno_text("read " + path.string());
      return false;
    }
    size_t pos = 0;
    std::string problem;
    if (data.size() < seg_header_size || std::memcmp(data.data(), seg_magic, 4) != 0) {
      problem = "segment header missing or damaged";
    } else {
      pos = seg_header_size;
      bool first_batch = true;
      while (pos < data.size()) {
        if (data.size() - pos < batch_header_size) {
          problem = "partial batch header";
          break;
        }
        const uint8_t* h = data.data() + pos;
        reader hr{proto::byte_view{h + 4, batch_header_size - 4}};
        uint32_t len = 0, prev = 0, crc = 0;
        uint64_t bseq = 0;
        hr.u32(len, "len");
        hr.u64(bseq, "seq");
        hr.u32(prev, "prev");
        hr.u32(crc, "crc");
        if (std::memcmp(h, batch_magic, 4) != 0) {
          problem = "bad batch magic";
          break;
        }
        if (data.size() - pos - batch_header_size < len) {
          problem = "partial batch body";
          break;
        }
        proto::byte_view body{h + batch_header_size, len};
        if (batch_crc(len, bseq, prev, body) != crc) {
          problem = "batch checksum mismatch";
          break;
        }
        bool chain_known = rep->batches > 0 || !first_batch;
        if (chain_known && (bseq != next_batch_seq || prev != prev_crc)) {
          problem = "batch chain broken (sequence " + std::to_string(bseq) + ", expected " +
                    std::to_string(next_batch_seq) + ")";
          break;
        }
        std::string body_err;
        if (!apply_body(body, seq, pos + batch_header_size, rep, &body_err)) {
          *err = path.string() + " at offset " + std::to_string(pos) +
                 ": checksummed batch does not parse: " + body_err;
          return false;
        }
        first_batch = false;
        next_batch_seq = bseq + 1;
        prev_crc = crc;
        rep->batches++;
        pos += batch_header_size + len;
      }
    }
    // Segments are preallocated with zeros: zeros after the last batch are the clean end.
    if (!problem.empty() && pos >= seg_header_size &&
        all_zero(data.data() + pos, data.size() - pos))
      problem.clear();
    if (!problem.empty()) {
      if (!last) {
        *err = path.string() + " at offset " + std::to_string(pos) + ": " + problem +
               "; this is not the last segment, so acknowledged records may be damaged. "
               "Refusing to start.";
        return false;
      }
      size_t end = data.size();
      while (end > pos && data[end - 1] == 0)
        --end;
      rep->torn_bytes = end - pos;
      rep->torn_reason = problem;
      if (pos < seg_header_size) {
        // Not even a header: rewrite it.
        bytes hdr;
        writer w{hdr};
        w.raw(proto::byte_view{seg_magic, 4});
        w.u32(format_version);
        w.u64(seq);
        if (!write_all(fd, hdr.data(), hdr.size(), 0)) {
          *err = errno_text("rewrite " + path.string());
          return false;
        }
        pos = seg_header_size;
      }
      // Zero the torn bytes, so the space stays preallocated and the next scan ends here.
      bytes zeros(end > pos ? end - pos : 0, 0);
      if (!write_all(fd, zeros.data(), zeros.size(), pos) || ::fdatasync(fd) != 0) {
        *err = errno_text("clear torn tail of " + path.string());
        return false;
      }
    }
    seg.size = pos;
    rep->segments++;
    return true;
  }

  bool load_checkpoint_lsns(std::string* err) {
    for (uint32_t s = 0; s < shards.size(); ++s) {
      auto p = ckpt_dir / ("shard-" + std::to_string(s) + ".ckpt");
      if (!fs::exists(p)) continue;
      bytes data;
      std::string e;
      if (!read_checkpoint_file(p, &shards[s].ckpt_lsn, &data, &e)) {
        *err = e;
        return false;
      }
    }
    return true;
  }

  static bool read_checkpoint_file(const fs::path& p, uint64_t* lsn, bytes* data,
                                   std::string* err) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      *err = errno_text("open " + p.string());
      return false;
    }
    struct stat sb {};
    ::fstat(fd, &sb);
    bytes all(static_cast<size_t>(sb.st_size));
    bool ok = all.empty() || read_all(fd, all.data(), all.size(), 0);
    ::close(fd);
    if (!ok) {
      *err = errno_text("read " + p.string());
      return false;
    }
    reader r{all};
    uint32_t len = 0, crc = 0;
    if (all.size() < 20 || std::memcmp(all.data(), ckpt_magic, 4) != 0) {
      *err = p.string() + ": not a checkpoint file";
      return false;
    }
    r.skip(4, "magic");
    r.u64(*lsn, "lsn");
    r.u32(len, "len");
    r.u32(crc, "crc");
    if (!r.ok() || r.remaining() != len) {
      *err = p.string() + ": truncated checkpoint";
      return false;
    }
    data->assign(all.end() - len, all.end());
    if (proto::crc32c(data->data(), data->size()) != crc) {
      *err = p.string() + ": checkpoint checksum mismatch";
      return false;
    }
    return true;
  }

  /// Starts preparing the next segment's zero-filled file in the background.
  void prepare_spare() {
    spare = std::async(std::launch::async, prepare_zero_file, wal_dir / "next.prep",
                       opts.segment_bytes);
  }

  /// Makes a preallocated file the new active segment and writes its snapshot batch.
  bool new_segment(std::string* err) {
    uint64_t seq = segments.empty() ? 1 : segments.rbegin()->first + 1;
    auto path = wal_dir / seg_name(seq);
    auto prep = wal_dir / "next.prep";
    std::string perr = spare.valid() ? spare.get() : prepare_zero_file(prep, opts.segment_bytes);
    if (!perr.empty()) {
      *err = perr;
      return false;
    }
    int fd = ::open(prep.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      *err = errno_text("open " + prep.string());
      return false;
    }
    bytes hdr;
    writer w{hdr};
    w.raw(proto::byte_view{seg_magic, 4});
    w.u32(format_version);
    w.u64(seq);
    if (!write_all(fd, hdr.data(), hdr.size(), 0) || ::fdatasync(fd) != 0 ||
        ::rename(prep.c_str(), path.c_str()) != 0 || !fsync_dir(wal_dir)) {
      *err = errno_text("initialise " + path.string());
      ::close(fd);
      return false;
    }
    prepare_spare();
    auto& seg = segments[seq];
    seg.seq = seq;
    seg.fd = fd;
    seg.size = seg_header_size;
    // The snapshot makes the segment self-sufficient for epochs and LSN numbering.
    bytes body;
    writer b{body};
    b.u8(sec_snapshot);
    uint32_t n = 0;
    for (auto& st : shards)
      n += (st.epoch.value() > 0 || st.last_lsn > 0) ? 1 : 0;
    b.u32(n);
    for (uint32_t s = 0; s < shards.size(); ++s) {
      auto& st = shards[s];
      if (st.epoch.value() == 0 && st.last_lsn == 0) continue;
      b.u32(s);
      b.u64(st.epoch.value());
      b.u64(st.last_lsn);
    }
    if (!write_batch(body, err)) return false;
    return true;
  }

  /// Appends one batch to the active segment and makes it durable.
  bool write_batch(const bytes& body, std::string* err) {
    auto& seg = active();
    if (inject_failure.exchange(false)) {
      *err = "write " + seg_name(seg.seq) + ": Input/output error (injected)";
      return false;
    }
    bytes buf;
    buf.reserve(batch_header_size + body.size());
    writer w{buf};
    uint32_t len = static_cast<uint32_t>(body.size());
    uint32_t crc = batch_crc(len, next_batch_seq, prev_crc, body);
    w.raw(proto::byte_view{batch_magic, 4});
    w.u32(len);
    w.u64(next_batch_seq);
    w.u32(prev_crc);
    w.u32(crc);
    w.raw(body);
    if (!write_all(seg.fd, buf.data(), buf.size(), seg.size)) {
      *err = errno_text("write " + seg_name(seg.seq));
      return false;
    }
    if (::fdatasync(seg.fd) != 0) {
      *err = errno_text("fdatasync " + seg_name(seg.seq));
      return false;
    }
    n_fsyncs++;
    n_batches++;
    seg.size += buf.size();
    next_batch_seq++;
    prev_crc = crc;
    return true;
  }

  // -- the writer loop ------------------------------------------------------------------------

  // Waking a sleeping thread costs tens of microseconds, a good part of an fsync. After a
  // batch the writer therefore spins for the next entry a little while (at most spin_us, and
  // about twice the time the last flush took, so a fast disk spins less) before it sleeps.
  void run() {
    std::vector<wal_entry> work;
    for (;;) {
      auto spin_until = std::chrono::steady_clock::now() + spin_budget;
      while (queued.load(std::memory_order_acquire) == 0 &&
             std::chrono::steady_clock::now() < spin_until)
        cpu_relax();
      {
        std::unique_lock<std::mutex> lk{mtx};
        if (queue.empty() && !stopping) {
          sleeping = true;
          cv.wait(lk, [&] { return !queue.empty() || stopping; });
          sleeping = false;
        }
        if (queue.empty() && stopping) return;
        work.swap(queue);
        queued.store(0, std::memory_order_release);
      }
      auto t0 = std::chrono::steady_clock::now();
      process(work);
      auto took = std::chrono::steady_clock::now() - t0;
      spin_budget =
          std::min<std::chrono::nanoseconds>(std::chrono::microseconds(opts.spin_us), 2 * took);
      work.clear();
    }
  }

  static void cpu_relax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }

  std::optional<proto::error> check_holder(const shard_state& st, uint32_t shard, session_id s,
                                           epoch_t e) const {
    return refuse_shard_request(shard, e, st.epoch, st.holder != 0, st.holder == s && s != 0);
  }

  std::optional<proto::error> check_shard(uint32_t shard) const {
    if (shard >= shards.size())
      return proto::error{err_code::bad_body, "no shard " + std::to_string(shard) + " (there are " +
                                                  std::to_string(shards.size()) + ")"};
    if (broken)
      return proto::error{err_code::io, "the log failed earlier (" + broken_reason +
                                            "); appends are refused until restart"};
    return std::nullopt;
  }
  /// The shard's state if `session` holds `shard` under `epoch` (and, to write, the log still
  /// works); otherwise the request is refused (to the session) and nullptr returned. Reads of
  /// durable data are served even after a write failure.
  shard_state* admit(session_id session, uint64_t request_id, shard_id shard, epoch_t epoch,
                     bool to_write = true) {
    uint32_t s = shard.value();
    std::optional<proto::error> err;
    if (s >= shards.size() || to_write) err = check_shard(s);
    if (!err) err = check_holder(shards[s], s, session, epoch);
    if (err) {
      sink->on_refused(session, request_id, *err);
      return nullptr;
    }
    return &shards[s];
  }

  struct pending_index {
    uint32_t shard;
    section_ref ref;
  };

  void process(std::vector<wal_entry>& work) {
    bytes body;
    writer w{body};
    std::vector<pending_index> new_sections;
    std::map<session_id, std::map<uint32_t, proto::position>> acks;
    std::vector<granted_shard> grants;
    std::vector<wal_revoke> revokes;
    std::vector<wal_entry*> after_commit;                  // checkpoints, loads, reads
    std::vector<std::pair<session_id, uint32_t>> touched;  // for IO_FAILED
    uint64_t base = active().size + batch_header_size;
    uint64_t records = 0;

    for (auto& e : work) {
      if (auto* a = std::get_if<wal_append>(&e)) {
        uint32_t s = a->shard.value();
        auto* admitted = admit(a->session, a->request_id, a->shard, a->epoch);
        if (!admitted) continue;
        auto& st = *admitted;
        if (a->first_lsn.value() != st.last_lsn + 1) {
          sink->on_refused(a->session, a->request_id,
                           proto::error{err_code::lsn_gap,
                                        "shard " + std::to_string(s) + ": first_lsn must be " +
                                            std::to_string(st.last_lsn + 1) + ", not " +
                                            std::to_string(a->first_lsn.value())});
          continue;
        }
        w.u8(sec_records);
        w.u32(s);
        w.u64(a->epoch.value());
        w.u64(a->first_lsn.value());
        w.u32(static_cast<uint32_t>(a->records.size()));
        section_ref ref{a->first_lsn.value(), static_cast<uint32_t>(a->records.size()),
                        active().seq, base + body.size(), 0};
        for (auto& rec : a->records) {
          w.u32(static_cast<uint32_t>(rec.size()));
          w.raw(rec);
        }
        ref.size = base + body.size() - ref.offset;
        new_sections.push_back({s, ref});
        st.last_lsn += a->records.size();
        records += a->records.size();
        acks[a->session][s] = proto::position{a->shard, a->epoch, lsn_t{st.last_lsn}};
        touched.emplace_back(a->session, s);
      } else if (auto* g = std::get_if<wal_grant>(&e)) {
        uint32_t s = g->shard.value();
        if (check_shard(s)) {
          grants.push_back({g->token, g->session, g->shard, epoch_t{0}, lsn_t{0}});
          continue;
        }
        auto& st = shards[s];
        st.epoch = epoch_t{st.epoch.value() + 1};
        st.holder = g->session;
        w.u8(sec_grant);
        w.u32(s);
        w.u64(st.epoch.value());
        grants.push_back({g->token, g->session, g->shard, st.epoch, lsn_t{st.last_lsn}});
      } else if (auto* r = std::get_if<wal_revoke>(&e)) {
        uint32_t s = r->shard.value();
        if (s < shards.size()) {
          auto& st = shards[s];
          if (st.epoch == r->epoch && (r->session == 0 || st.holder == r->session)) st.holder = 0;
        }
        revokes.push_back(*r);
      } else {
        after_commit.push_back(&e);
      }
    }

    if (!body.empty()) {
      std::string err;
      if (!write_batch(body, &err)) {
        fail(err, touched, grants);
        return;
      }
      n_records += records;
    }
    for (auto& p : new_sections) {
      auto& st = shards[p.shard];
      st.index.push_back(p.ref);
      st.durable_lsn = p.ref.first_lsn + p.ref.count - 1;
      auto& m = active().max_lsn[p.shard];
      m = std::max(m, st.durable_lsn);
    }
    for (auto& [session, per_shard] : acks) {
      std::vector<proto::position> pos;
      pos.reserve(per_shard.size());
      for (auto& [s, p] : per_shard)
        pos.push_back(p);
      sink->on_durable(session, std::move(pos));
    }
    if (!grants.empty()) sink->on_granted(std::move(grants));
    for (auto& r : revokes)
      sink->on_revoked(r.token, r.shard, r.epoch);
    for (auto* e : after_commit)
      serve_after_commit(*e);
    if (active().size > opts.segment_bytes) {
      std::string err;
      if (!new_segment(&err)) fail(err, {}, {});
    }
  }

  void fail(const std::string& err, const std::vector<std::pair<session_id, uint32_t>>& touched,
            std::vector<granted_shard> grants) {
    broken = true;
    broken_reason = err;
    for (auto& st : shards)
      st.last_lsn = st.durable_lsn;
    for (auto& [session, s] : touched)
      sink->on_io_failed(session, shard_id{s}, shards[s].epoch, err);
    for (auto& g : grants) {
      g.epoch = epoch_t{0};  // not granted
    }
    if (!grants.empty()) sink->on_granted(std::move(grants));
  }

  void serve_after_commit(wal_entry& e) {
    if (auto* c = std::get_if<wal_checkpoint>(&e)) {
      uint32_t s = c->shard.value();
      auto* admitted = admit(c->session, c->request_id, c->shard, c->epoch);
      if (!admitted) return;
      auto& st = *admitted;
      if (c->lsn.value() > st.durable_lsn) {
        sink->on_refused(c->session, c->request_id,
                         proto::error{err_code::bad_body, "checkpoint lsn " +
                                                              std::to_string(c->lsn.value()) +
                                                              " is past the shard's durable LSN " +
                                                              std::to_string(st.durable_lsn)});
        return;
      }
      bytes file;
      writer fw{file};
      fw.raw(proto::byte_view{ckpt_magic, 4});
      fw.u64(c->lsn.value());
      fw.u32(static_cast<uint32_t>(c->data.size()));
      fw.u32(proto::crc32c(c->data.data(), c->data.size()));
      fw.raw(c->data);
      std::string err;
      if (!write_file_durably(ckpt_dir / ("shard-" + std::to_string(s) + ".ckpt"), file, &err)) {
        sink->on_refused(c->session, c->request_id, proto::error{err_code::io, err});
        return;
      }
      n_fsyncs += 2;
      st.ckpt_lsn = std::max(st.ckpt_lsn, c->lsn.value());
      retire();  // before the OK, so a caller that saw the OK sees the segments gone
      sink->on_answer(c->session, proto::ok{c->request_id, {}});
    } else if (auto* l = std::get_if<wal_load_checkpoint>(&e)) {
      uint32_t s = l->shard.value();
      if (!admit(l->session, l->request_id, l->shard, l->epoch, false)) return;
      auto p = ckpt_dir / ("shard-" + std::to_string(s) + ".ckpt");
      proto::checkpoint_data out{l->request_id, lsn_t{0}, {}};
      if (fs::exists(p)) {
        uint64_t lsn = 0;
        std::string err;
        if (!read_checkpoint_file(p, &lsn, &out.data, &err)) {
          sink->on_refused(l->session, l->request_id, proto::error{err_code::io, err});
          return;
        }
        out.lsn = lsn_t{lsn};
      }
      sink->on_answer(l->session, std::move(out));
    } else if (auto* r = std::get_if<wal_read>(&e)) {
      serve_read(*r);
    }
  }

  void serve_read(const wal_read& r) {
    uint32_t s = r.shard.value();
    auto* admitted = admit(r.session, r.request_id, r.shard, r.epoch, false);
    if (!admitted) return;
    auto& st = *admitted;
    proto::log_page page{r.request_id, r.shard, lsn_t{r.after.value() + 1},
                         {},           0,       lsn_t{st.durable_lsn}};
    uint64_t want = r.after.value() + 1;
    if (want > st.durable_lsn) {
      sink->on_answer(r.session, std::move(page));
      return;
    }
    auto it = std::upper_bound(st.index.begin(), st.index.end(), want,
                               [](uint64_t v, const section_ref& x) { return v < x.first_lsn; });
    if (it == st.index.begin()) {
      uint64_t first = st.index.empty() ? st.durable_lsn + 1 : st.index.front().first_lsn;
      sink->on_refused(r.session, r.request_id,
                       proto::error{err_code::bad_body,
                                    "shard " + std::to_string(s) + ": records before LSN " +
                                        std::to_string(first) +
                                        " were retired after a checkpoint; load the checkpoint "
                                        "and recover after its LSN"});
      return;
    }
    --it;
    uint64_t limit = std::min<uint64_t>(r.max_bytes, opts.max_read_bytes);
    uint64_t total = 0;
    uint64_t lsn = want;
    bool stop = false;
    for (; it != st.index.end() && !stop; ++it) {
      bytes region(it->size);
      auto seg = segments.find(it->segment);
      if (seg == segments.end() ||
          !read_all(seg->second.fd, region.data(), region.size(), it->offset)) {
        sink->on_refused(
            r.session, r.request_id,
            proto::error{err_code::io, errno_text("read log of shard " + std::to_string(s))});
        return;
      }
      reader rr{region};
      for (uint32_t i = 0; i < it->count; ++i) {
        uint32_t len = 0;
        if (!rr.u32(len, "record") || rr.remaining() < len) {
          sink->on_refused(r.session, r.request_id,
                           proto::error{err_code::io, "log of shard " + std::to_string(s) +
                                                          " is damaged on disk"});
          return;
        }
        uint64_t this_lsn = it->first_lsn + i;
        if (this_lsn < lsn) {
          rr.skip(len, "record");
          continue;
        }
        if (!page.records.empty() && total + len > limit) {
          stop = true;
          break;
        }
        bytes rec(region.begin() + static_cast<ptrdiff_t>(rr.offset()),
                  region.begin() + static_cast<ptrdiff_t>(rr.offset() + len));
        if (!rr.skip(len, "record")) break;
        total += len;
        page.records.push_back(std::move(rec));
        lsn = this_lsn + 1;
      }
    }
    page.more = lsn <= st.durable_lsn ? 1 : 0;
    sink->on_answer(r.session, std::move(page));
  }

  /// Deletes the oldest segments whose every record is covered by its shard's checkpoint.
  void retire() {
    while (segments.size() > 1) {
      auto& oldest = segments.begin()->second;
      bool covered = true;
      for (auto& [s, max] : oldest.max_lsn)
        if (max > shards[s].ckpt_lsn) {
          covered = false;
          break;
        }
      if (!covered) return;
      uint64_t seq = oldest.seq;
      ::close(oldest.fd);
      fs::remove(wal_dir / seg_name(seq));
      fsync_dir(wal_dir);
      segments.erase(segments.begin());
      for (auto& st : shards)
        while (!st.index.empty() && st.index.front().segment <= seq)
          st.index.erase(st.index.begin());
      n_retired++;
    }
  }
};

wal_writer::wal_writer(std::unique_ptr<impl> p) : impl_(std::move(p)) {}

wal_writer::~wal_writer() {
  stop();
}

std::unique_ptr<wal_writer> wal_writer::open(const wal_options& opts, wal_sink* sink,
                                             std::string* error, wal_recovery_report* report) {
  auto p = std::make_unique<impl>();
  p->opts = opts;
  p->sink = sink;
  p->wal_dir = opts.dir / "wal";
  p->ckpt_dir = opts.dir / "checkpoints";
  p->shards.resize(opts.shards);
  wal_recovery_report local;
  auto* rep = report ? report : &local;
  std::error_code ec;
  fs::create_directories(p->wal_dir, ec);
  fs::create_directories(p->ckpt_dir, ec);
  if (ec) {
    *error = "cannot create " + p->wal_dir.string() + ": " + ec.message();
    return nullptr;
  }
  if (!p->check_meta(error)) return nullptr;
  std::vector<std::pair<uint64_t, fs::path>> segs;
  for (auto& ent : fs::directory_iterator(p->wal_dir)) {
    auto name = ent.path().filename().string();
    if (name.rfind("seg-", 0) == 0 && name.size() == 4 + 16 + 4 && name.ends_with(".wal"))
      segs.emplace_back(std::stoull(name.substr(4, 16), nullptr, 16), ent.path());
    else if (name.ends_with(".tmp") || name.ends_with(".prep"))
      fs::remove(ent.path(), ec);
  }
  std::sort(segs.begin(), segs.end());
  for (size_t i = 0; i < segs.size(); ++i)
    if (!p->recover_segment(segs[i].first, segs[i].second, i + 1 == segs.size(), rep, error))
      return nullptr;
  if (!p->load_checkpoint_lsns(error)) return nullptr;
  for (auto& st : p->shards)
    st.durable_lsn = st.last_lsn;
  if (p->segments.empty() && !p->new_segment(error)) return nullptr;
  auto* raw = p.get();
  p->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<wal_writer>(new wal_writer(std::move(p)));
}

void wal_writer::submit(wal_entry e) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk{impl_->mtx};
    impl_->queue.push_back(std::move(e));
    impl_->queued.store(impl_->queue.size(), std::memory_order_release);
    wake = impl_->sleeping;
  }
  if (wake) impl_->cv.notify_one();
}

void wal_writer::submit(std::vector<wal_entry> es) {
  bool wake;
  {
    std::lock_guard<std::mutex> lk{impl_->mtx};
    for (auto& e : es)
      impl_->queue.push_back(std::move(e));
    impl_->queued.store(impl_->queue.size(), std::memory_order_release);
    wake = impl_->sleeping;
  }
  if (wake) impl_->cv.notify_one();
}

void wal_writer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lk{impl_->mtx};
    impl_->stopping = true;
    impl_->queued.store(1, std::memory_order_release);  // ends a spin at once
  }
  impl_->cv.notify_one();
  impl_->thread.join();
}

void wal_writer::inject_write_failure() {
  impl_->inject_failure = true;
}

void wal_writer::grant(uint64_t token, session_id session, shard_id shard) {
  submit(wal_grant{token, session, shard});
}

void wal_writer::revoke(uint64_t token, shard_id shard, epoch_t epoch, session_id holder) {
  submit(wal_revoke{token, shard, epoch, holder});
}

epoch_t wal_writer::recovered_epoch(shard_id s) const {
  return impl_->shards.at(s.value()).epoch;
}

lsn_t wal_writer::recovered_durable_lsn(shard_id s) const {
  return lsn_t{impl_->shards.at(s.value()).durable_lsn};
}

wal_writer::stats wal_writer::get_stats() const {
  return stats{impl_->n_batches, impl_->n_records, impl_->n_fsyncs, impl_->segments.size(),
               impl_->n_retired};
}

std::vector<double> wal_writer::measure_fsync_us(const fs::path& dir, int n, bool preallocated,
                                                 int idle_ms) {
  std::vector<double> out;
  auto path = dir / "fusee-disk-check.tmp";
  if (preallocated && !prepare_zero_file(path, static_cast<uint64_t>(n) * 4096).empty()) return out;
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | (preallocated ? 0 : O_TRUNC) | O_CLOEXEC, 0644);
  if (fd < 0) return out;
  bytes block(4096, 0x5a);
  for (int i = 0; i < n; ++i) {
    if (idle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    auto t0 = std::chrono::steady_clock::now();
    if (!write_all(fd, block.data(), block.size(), static_cast<uint64_t>(i) * block.size()) ||
        ::fdatasync(fd) != 0)
      break;
    auto t1 = std::chrono::steady_clock::now();
    out.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  ::close(fd);
  ::unlink(path.c_str());
  return out;
}

}  // namespace fusee::server
