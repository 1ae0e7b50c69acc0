#include "actors/out_lane.hpp"

#include <algorithm>
#include <cerrno>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fusee::server {

// Without a duplicate (fd_ < 0) every frame waits for the owner.
out_lane::out_lane(int fd, uint64_t limit) : fd_(::fcntl(fd, F_DUPFD_CLOEXEC, 0)), limit_(limit) {}

out_lane::~out_lane() {
  close();
}

out_lane::outcome out_lane::wake() {
  if (owner_told_) return outcome::queued;
  owner_told_ = true;
  return outcome::wake_owner;
}

out_lane::outcome out_lane::send(const std::vector<uint8_t>& frame) {
  std::lock_guard<std::mutex> lk{mtx_};
  if (!open_) return outcome::closed;
  if (over_) return wake();
  frames_accepted_++;
  bytes_accepted_ += frame.size();
  size_t sent = 0;
  if (queued_total_ == written_total_) {
    // Nothing waits: the kernel takes what fits now; the rest waits, and so does every later
    // frame, so nothing can land inside it.
    while (sent < frame.size() && fd_ >= 0) {
      ssize_t n =
          ::send(fd_, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        sent += static_cast<size_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        break;
      } else {
        // The connection broke (perhaps mid-frame): end it, so the broker's read side sees it
        // close and ends the session; nothing more may be written.
        ::shutdown(fd_, SHUT_RDWR);
        open_ = false;
        return outcome::closed;
      }
    }
    if (sent == frame.size()) return outcome::written;
  } else if (queued_total_ - frame_ends_.front() > limit_) {
    over_ = true;
    pending_ = {};
    return wake();
  }
  pending_.insert(pending_.end(), frame.begin() + static_cast<ptrdiff_t>(sent), frame.end());
  queued_total_ += frame.size() - sent;
  frame_ends_.push_back(queued_total_);
  return wake();
}

out_lane::drained out_lane::drain(std::vector<uint8_t>& out) {
  std::lock_guard<std::mutex> lk{mtx_};
  owner_told_ = false;
  if (!open_) return drained::closed;
  if (over_) return drained::over_limit;
  out = std::move(pending_);
  pending_ = {};
  return drained::ok;
}

void out_lane::transferred(uint64_t n) {
  std::lock_guard<std::mutex> lk{mtx_};
  written_total_ = std::min(written_total_ + n, queued_total_);
  while (!frame_ends_.empty() && frame_ends_.front() <= written_total_)
    frame_ends_.pop_front();
}

uint64_t out_lane::waiting() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return queued_total_ - written_total_;
}

out_lane::totals out_lane::accepted() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return totals{frames_accepted_, bytes_accepted_};
}

uint64_t out_lane::waiting_behind_head() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return frame_ends_.empty() ? 0 : queued_total_ - frame_ends_.front();
}

void out_lane::abort() {
  {
    std::lock_guard<std::mutex> lk{mtx_};
    if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
  }
  close();
}

void out_lane::close() {
  std::lock_guard<std::mutex> lk{mtx_};
  open_ = false;
  pending_ = {};
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace fusee::server
