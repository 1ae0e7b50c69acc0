#include "actors/wal/file_io.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fusee::server::wal {

proto::error io_error(const std::string& what, const fs::path& path) {
  return proto::error{proto::err_code::io,
                      what + " " + path.string() + ": " + std::strerror(errno)};
}

// A log file's attributes are asked for with statx and only the field wanted, never with fstat:
// asking for its mtime or ctime (fstat asks for all) makes the kernel give the file's next write a
// fine-grained timestamp (multigrain timestamps, Linux 6.13 and later), which dirties the inode,
// so that write's fdatasync has to commit it too: +38 us on each batch after an fstat on this
// project's machine (docs/benchmarks.md, "Thirty-eighth session").

/// statx of the open file `fd` for `mask` only.
static bool statx_of(int fd, unsigned mask, struct statx& out) {
  return ::statx(fd, "", AT_EMPTY_PATH, mask, &out) == 0;
}

file::~file() {
  close();
}

file& file::operator=(file&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
  }
  return *this;
}

void file::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

proto::result<file> file::open(const fs::path& path, int flags, int mode) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return io_error("open", path);
  return file{fd};
}

proto::result<file> file::open_in(int dir, const fs::path& path, int flags, int mode) {
  if (dir < 0) return open(path, flags, mode);
  int fd = ::openat(dir, path.filename().c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) return io_error("open", path);
  return file{fd};
}

proto::result<file> lock_data_dir(const fs::path& dir) {
  auto path = dir / "fusee.lock";
  auto f = file::open(path, O_RDWR | O_CREAT);
  if (!f) return f.err();
  while (::flock(f->fd(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno != EWOULDBLOCK) return io_error("flock", path);
    // Who holds it, as far as its last holder wrote (informational only).
    proto::bytes held(32, 0);
    ssize_t n = ::pread(f->fd(), held.data(), held.size(), 0);
    std::string pid(held.begin(), held.begin() + std::max<ssize_t>(n, 0));
    pid.erase(std::find_if(pid.begin(), pid.end(), [](char c) { return c < '0' || c > '9'; }),
              pid.end());
    return proto::error{proto::err_code::io,
                        "the data dir " + dir.string() + " is in use by another process" +
                            (pid.empty() ? std::string{} : " (pid " + pid + ")") +
                            ": two servers on one log would overwrite each other's records. "
                            "Stop the other server or give this one another data dir."};
  }
  auto pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(f->fd(), 0) == 0)
    (void)f->write_at(proto::as_bytes(pid), 0, path);  // informational: who holds it
  return f;
}

proto::result<file::naming> file::named_by(const fs::path& path) const {
  struct statx held {};
  if (!statx_of(fd_, STATX_INO, held)) return io_error("stat", path);
  struct statx named {};
  if (::statx(AT_FDCWD, path.c_str(), 0, STATX_INO, &named) != 0) {
    if (errno == ENOENT || errno == ENOTDIR || errno == ESTALE) return naming::gone;
    return io_error("stat", path);
  }
  bool same = named.stx_dev_major == held.stx_dev_major &&
              named.stx_dev_minor == held.stx_dev_minor && named.stx_ino == held.stx_ino;
  return same ? naming::same : naming::other;
}

proto::result<void> check_data_dir_lock(const file& lock, const fs::path& dir) {
  auto path = dir / "fusee.lock";
  auto named = lock.named_by(path);
  if (!named)
    return proto::error{proto::err_code::io, "cannot check that the data dir " + dir.string() +
                                                 " is still this server's: " + named.err().message};
  if (*named == file::naming::same) return {};
  return proto::error{proto::err_code::io,
                      "the data dir " + dir.string() +
                          " is no longer this server's: " + path.string() +
                          (*named == file::naming::gone ? " is gone" : " is another file") +
                          " (was the data dir moved, deleted or replaced while the server "
                          "ran?). The log stops, so that nothing is written or removed there "
                          "by name. Stop this server, put the data dir back and restart it"};
}

proto::result<void> file::write_at(proto::byte_view data, uint64_t offset,
                                   const fs::path& path) const {
  const uint8_t* p = data.data();
  size_t n = data.size();
  while (n > 0) {
    ssize_t w = ::pwrite(fd_, p, n, static_cast<off_t>(offset));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return io_error("write", path);
    p += w;
    n -= static_cast<size_t>(w);
    offset += static_cast<uint64_t>(w);
  }
  return {};
}

proto::result<void> file::read_at(proto::bytes& out, uint64_t offset, const fs::path& path) const {
  uint8_t* p = out.data();
  size_t n = out.size();
  while (n > 0) {
    ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return io_error("read", path);
    if (r == 0)
      return proto::error{proto::err_code::io,
                          "read " + path.string() + ": file ends at " + std::to_string(offset)};
    p += r;
    n -= static_cast<size_t>(r);
    offset += static_cast<uint64_t>(r);
  }
  return {};
}

void file::start_writeback(uint64_t offset, uint64_t size) const {
  (void)::sync_file_range(fd_, static_cast<off_t>(offset), static_cast<off_t>(size),
                          SYNC_FILE_RANGE_WRITE);
}

proto::result<void> file::sync(const fs::path& path) const {
  if (::fdatasync(fd_) != 0) return io_error("fdatasync", path);
  return {};
}

proto::result<void> file::sync_all(const fs::path& path) const {
  if (::fsync(fd_) != 0) return io_error("fsync", path);
  return {};
}

proto::result<uint64_t> file::size(const fs::path& path) const {
  struct statx sx {};
  if (!statx_of(fd_, STATX_SIZE, sx)) return io_error("stat", path);
  return static_cast<uint64_t>(sx.stx_size);
}

proto::result<void> file::check_linked(const fs::path& path) const {
  struct statx sx {};
  if (!statx_of(fd_, STATX_NLINK, sx)) return io_error("stat", path);
  if (!(sx.stx_mask & STATX_NLINK) || sx.stx_nlink > 0) return {};  // (no count: cannot tell)
  return proto::error{proto::err_code::io,
                      path.string() + " was deleted while the server ran (was the data dir "
                                      "removed, or the file cleaned up?): its records are under "
                                      "no name on disk, and a restart would not find them"};
}

proto::result<proto::bytes> read_file(const fs::path& path) {
  auto f = file::open(path, O_RDONLY);
  if (!f) return f.err();
  auto n = f->size(path);
  if (!n) return n.err();
  proto::bytes all(*n);
  if (auto r = f->read_at(all, 0, path); !r) return r.err();
  return all;
}

proto::result<void> sync_dir(const fs::path& dir) {
  auto d = file::open(dir, O_RDONLY | O_DIRECTORY);
  if (!d) return d.err();
  return d->sync_all(dir);
}

proto::result<void> write_file_durably(const fs::path& path, proto::byte_view data) {
  auto tmp = path;
  tmp += ".tmp";
  // A temporary file that failed is removed at once: on a full disk it would hold the space the
  // next attempt needs (the start removes any left by a crash).
  auto failed = [&tmp](proto::error e) {
    ::unlink(tmp.c_str());
    return e;
  };
  {
    auto f = file::open(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    if (!f) return f.err();
    if (auto r = f->write_at(data, 0, tmp); !r) return failed(r.err());
    if (auto r = f->sync(tmp); !r) return failed(r.err());
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) return failed(io_error("rename", tmp));
  return sync_dir(path.parent_path());
}

proto::result<void> write_zeros(const file& f, uint64_t from, uint64_t to, const fs::path& path,
                                const fill_pace& pace) {
  proto::bytes zeros(pace ? zero_fill_chunk : 1 << 20, 0);
  for (uint64_t off = from; off < to; off += zeros.size()) {
    auto n = static_cast<size_t>(std::min<uint64_t>(zeros.size(), to - off));
    if (auto r = f.write_at(proto::byte_view{zeros.data(), n}, off, path); !r) return r.err();
    if (!pace) continue;
    // Written out now, while it is small: the log's commits queue behind one chunk at most. The
    // wait takes any writeback error from the caller's fdatasync, so it is this call's to report.
    if (::sync_file_range(f.fd(), static_cast<off_t>(off), static_cast<off_t>(n),
                          SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                              SYNC_FILE_RANGE_WAIT_AFTER) != 0)
      return io_error("write out", path);
    auto step = pace(off + n);
    if (step == fill_step::stop)
      return proto::error{proto::err_code::io, "zero-fill " + path.string() + ": abandoned"};
    if (step == fill_step::pause) std::this_thread::sleep_for(zero_fill_pause);
  }
  return {};
}

proto::result<file> create_zero_file(const fs::path& path, uint64_t size, const fill_pace& pace,
                                     int dir) {
  auto f = file::open_in(dir, path, O_RDWR | O_CREAT | O_TRUNC);
  if (!f) return f.err();
  if (auto r = write_zeros(*f, 0, size, path, pace); !r) return r.err();
  if (auto r = f->sync(path); !r) return r.err();
  return std::move(*f);
}

}  // namespace fusee::server::wal
