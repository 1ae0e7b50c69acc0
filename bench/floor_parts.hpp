// Parts shared by the machine-floor programs (wire_floor, commit_floor): a preallocated file
// written and fdatasynced as the log writes, and a loopback listener on an ephemeral port.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace bench {

/// A 64 MiB file of zeros, synced before use (as the log's segments are preallocated); each
/// commit writes the next `bytes` where the last ended and fdatasyncs, wrapping around (as the
/// log appends its batches).
class floor_disk {
public:
  static constexpr uint64_t block = 4096;

  explicit floor_disk(const std::string& dir, const char* who) : path_(dir + "/" + who + ".tmp") {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      std::fprintf(stderr, "%s: cannot create %s: %s\n", who, path_.c_str(), std::strerror(errno));
      std::exit(1);
    }
    std::vector<char> zeros(1 << 20, 0);
    for (uint64_t o = 0; o < size_; o += zeros.size())
      (void)!::pwrite(fd_, zeros.data(), zeros.size(), static_cast<off_t>(o));
    ::fsync(fd_);
  }
  ~floor_disk() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  floor_disk(const floor_disk&) = delete;
  floor_disk& operator=(const floor_disk&) = delete;

  /// Writes the next `bytes` and fdatasyncs them.
  void commit(uint64_t bytes = block) {
    write(bytes, false);
    sync();
  }
  /// Writes the next `bytes` (not yet durable); with `start`, their disk write begins now
  /// (sync_file_range), as fusee's log does when it has answers to send before the sync.
  void write(uint64_t bytes, bool start) {
    if (buf_.size() < bytes) buf_.resize(bytes, 'x');
    if (at_ + bytes > size_) at_ = 0;
    if (::pwrite(fd_, buf_.data(), bytes, static_cast<off_t>(at_)) != static_cast<ssize_t>(bytes)) {
      std::perror("floor_disk: write");
      std::exit(1);
    }
    if (start)
      (void)::sync_file_range(fd_, static_cast<off_t>(at_), static_cast<off_t>(bytes),
                              SYNC_FILE_RANGE_WRITE);
    at_ += bytes;
  }
  void sync() {
    if (::fdatasync(fd_) != 0) {
      std::perror("floor_disk: fdatasync");
      std::exit(1);
    }
  }

private:
  std::string path_;
  int fd_ = -1;
  uint64_t at_ = 0;
  uint64_t size_ = 64ull << 20;
  std::vector<char> buf_;
};

/// Reads exactly `n` bytes (blocking); false once the peer closed or failed.
inline bool read_full(int fd, char* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

/// A listening socket on 127.0.0.1 and an ephemeral port, written to `addr`; exits on failure.
inline int listen_loopback(sockaddr_in& addr, int backlog) {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  addr = sockaddr_in{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(lfd, backlog) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::perror("listen on 127.0.0.1");
    std::exit(1);
  }
  return lfd;
}

}  // namespace bench
