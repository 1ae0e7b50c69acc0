// File I/O for the log: whole reads and writes at an offset, durable file replacement and the
// zero-filled files segments start as. Every failure is a value whose message names the file and
// the system's reason. Blocking: the log's committing thread, start-up, and the thread that
// fills the spare segment.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>

#include "protocol/result.hpp"
#include "protocol/wire.hpp"

namespace fusee::server::wal {

namespace fs = std::filesystem;

/// An open file descriptor, closed on destruction.
class file {
public:
  file() = default;
  explicit file(int fd) : fd_(fd) {}
  ~file();
  file(file&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  file& operator=(file&& o) noexcept;
  file(const file&) = delete;
  file& operator=(const file&) = delete;

  /// Opens `path` with open(2) `flags` (O_CLOEXEC is added); a file it creates is the owner's only
  /// (workflow records and checkpoints are nobody else's to read).
  static proto::result<file> open(const fs::path& path, int flags, int mode = 0600);
  /// As open(), but `path`'s file name in the directory open as `dir` (wherever it is now: a dir
  /// moved away is still the one written, a deleted one takes no new files); -1: `path` as it is.
  static proto::result<file> open_in(int dir, const fs::path& path, int flags, int mode = 0600);

  int fd() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  void close();

  /// All of `data` at `offset`; `path` names the file in the error.
  proto::result<void> write_at(proto::byte_view data, uint64_t offset, const fs::path& path) const;
  /// Exactly `out.size()` bytes at `offset`.
  proto::result<void> read_at(proto::bytes& out, uint64_t offset, const fs::path& path) const;
  /// Asks the kernel to start writing `size` bytes at `offset` to the disk, without waiting (a
  /// hint: what is durable is still only what sync() covered; a failure shows in sync()). Never
  /// waits for the writeback: a wait could take the error that the following sync() must see.
  void start_writeback(uint64_t offset, uint64_t size) const;
  proto::result<void> sync(const fs::path& path) const;      ///< fdatasync
  proto::result<void> sync_all(const fs::path& path) const;  ///< fsync (a directory's entries)
  proto::result<uint64_t> size(const fs::path& path) const;
  /// Fails if the file has no name left (deleted, or its directory removed, while it was open):
  /// what is in it is then lost when it is closed, synced or not. One statx, for the link count
  /// only (file_io.cpp: never fstat on a log file).
  proto::result<void> check_linked(const fs::path& path) const;
  /// Whether `path` names this open file now: the same file, none, or another one (moved,
  /// deleted or replaced). One statx of each, for the identity only.
  enum class naming { same, gone, other };
  proto::result<naming> named_by(const fs::path& path) const;

private:
  int fd_ = -1;
};

/// The data dir's lock: `dir`/fusee.lock, held (flock, exclusive) for as long as the returned
/// file is open, and released by the kernel when the process ends however it ends. Refused if
/// another process holds it: two servers on one log would each overwrite what the other wrote.
proto::result<file> lock_data_dir(const fs::path& dir);

/// Fails if `dir`/fusee.lock is no longer the file `lock` holds (moved, deleted or replaced while
/// the server ran): files made, replaced or removed by name under `dir` would then not be this
/// server's, perhaps another's log. (file::named_by.)
proto::result<void> check_data_dir_lock(const file& lock, const fs::path& dir);

/// The whole file.
proto::result<proto::bytes> read_file(const fs::path& path);

/// Makes a directory's entries (new, renamed, removed files) durable.
proto::result<void> sync_dir(const fs::path& dir);

/// Replaces `path` with `data` atomically and durably (temp file, fdatasync, rename, fsync dir).
proto::result<void> write_file_durably(const fs::path& path, proto::byte_view data);

/// How a paced zero fill goes on after each chunk, told the bytes written so far.
enum class fill_step {
  go_on,  ///< the next chunk at once
  pause,  ///< zero_fill_pause first
  stop,   ///< no more: the fill fails (nobody wants the file)
};
using fill_pace = std::function<fill_step(uint64_t filled)>;
inline constexpr uint64_t zero_fill_chunk = 256 * 1024;
inline constexpr std::chrono::microseconds zero_fill_pause{1000};

/// Creates `path` filled with `size` zero bytes, durably, and returns it open for reading and
/// writing. Writing into a file whose blocks exist lets fdatasync skip the metadata update an
/// extending write needs (175 us instead of 240 us per commit on the development machine,
/// docs/benchmarks.md).
///
/// With `pace` (the spare segment, filled on a thread of its own while the log commits), the
/// zeros go to the disk a zero_fill_chunk at a time, each written out before the next, and `pace`
/// says after each whether to pause: a fill written all at once sat in the device's queue ahead
/// of the log's next commit, whose fdatasync then took 11-12.5 ms instead of ~0.2 (docs/
/// benchmarks.md, "Twelfth session"). Blocks: never on a CAF thread.
///
/// `dir`: as file::open_in's.
proto::result<file> create_zero_file(const fs::path& path, uint64_t size,
                                     const fill_pace& pace = {}, int dir = -1);
/// Zeros over bytes [from, to) of `f`, paced as create_zero_file's when `pace` is set (it is told
/// the offset reached); not synced.
proto::result<void> write_zeros(const file& f, uint64_t from, uint64_t to, const fs::path& path,
                                const fill_pace& pace = {});

/// An I/O error value: "<what> <path>: <strerror(errno)>".
proto::error io_error(const std::string& what, const fs::path& path);

}  // namespace fusee::server::wal
