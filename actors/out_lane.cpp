#include "actors/out_lane.hpp"

#include <cerrno>

#include <fcntl.h>
#include <linux/sockios.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fusee::server {

namespace {

/// True if `n` more bytes fit in the socket's send buffer now (it only drains meanwhile: every
/// send on this fd holds the lane's mutex).
bool fits(int fd, size_t n) {
  int sndbuf = 0;
  socklen_t len = sizeof(sndbuf);
  int used = 0;
  if (::getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, &len) != 0 ||
      ::ioctl(fd, SIOCOUTQ, &used) != 0)
    return false;
  // Linux reports twice the payload capacity (the rest is bookkeeping): stay within half.
  return static_cast<size_t>(used) + n <= static_cast<size_t>(sndbuf) / 2;
}

}  // namespace

// Without a duplicate (fd_ < 0) every frame takes the broker's path.
out_lane::out_lane(int fd) : fd_(::fcntl(fd, F_DUPFD_CLOEXEC, 0)) {}

out_lane::~out_lane() {
  close();
}

out_lane::outcome out_lane::try_send(const std::vector<uint8_t>& frame,
                                     std::vector<uint8_t>* rest) {
  std::lock_guard<std::mutex> lk{mtx_};
  if (!open_) return outcome::closed;
  if (queued_ == 0 && fd_ >= 0 && fits(fd_, frame.size())) {
    size_t sent = 0;
    while (sent < frame.size()) {
      ssize_t n =
          ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN && sent > 0) {
        // Should not happen after fits(); a frame must never be split by another, so wait a
        // little for the rest rather than hand over half a frame.
        pollfd p{fd_, POLLOUT, 0};
        if (::poll(&p, 1, 1000) > 0) continue;
      }
      if (sent == 0 && n < 0 && errno == EAGAIN) break;  // nothing sent: take the queued path below
      // A broken connection, or a frame cut in half: end it; the broker sees it close.
      ::shutdown(fd_, SHUT_RDWR);
      ::close(fd_);
      fd_ = -1;
      open_ = false;
      return outcome::closed;
    }
    if (sent == frame.size()) return outcome::sent;
  }
  *rest = frame;
  queued_ += frame.size();
  return outcome::queue_it;
}

void out_lane::transferred(uint64_t n) {
  std::lock_guard<std::mutex> lk{mtx_};
  queued_ = n > queued_ ? 0 : queued_ - n;
}

void out_lane::close() {
  std::lock_guard<std::mutex> lk{mtx_};
  open_ = false;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace fusee::server
