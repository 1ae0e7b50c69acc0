#include "actors/net/out_lane.hpp"

#include <algorithm>
#include <cerrno>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fusee::server {

// Without a duplicate (fd_ < 0) every frame waits (and nothing is ever written).
out_lane::out_lane(int fd, uint64_t limit, int spare)
    : fd_(spare >= 0 ? ::dup3(fd, spare, O_CLOEXEC) : ::fcntl(fd, F_DUPFD_CLOEXEC, 0)),
      limit_(limit) {
  if (fd_ < 0 && spare >= 0) ::close(spare);
}

out_lane::~out_lane() {
  abort();
}

bool out_lane::write_from(const uint8_t* data, size_t size, size_t& sent) {
  while (sent < size && fd_ >= 0) {
    ssize_t n = ::send(fd_, data + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      break;
    } else {
      failure_ = n < 0 ? errno : EPIPE;  // a send of 0 bytes would not make progress either
      return false;
    }
  }
  return true;
}

void out_lane::broke() {
  // Perhaps mid-frame: end the connection, so the read side sees it close and the session ends;
  // nothing more may be written.
  ::shutdown(fd_, SHUT_RDWR);
  open_ = false;
  pending_ = {};
}

void out_lane::end() {
  open_ = false;
  pending_ = {};
  if (fd_ >= 0) {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
  }
  fd_ = -1;
}

bool out_lane::write_pending() {
  size_t before = sent_;
  bool ok = write_from(pending_.data(), pending_.size(), sent_);
  written_total_ += sent_ - before;
  if (!ok) return false;
  while (!frame_ends_.empty() && frame_ends_.front() <= written_total_)
    frame_ends_.pop_front();
  if (sent_ == pending_.size()) {
    pending_.clear();
    sent_ = 0;
  } else if (sent_ >= (1u << 20) && sent_ * 2 >= pending_.size()) {  // keep the buffer bounded
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<ptrdiff_t>(sent_));
    sent_ = 0;
  }
  return true;
}

out_lane::outcome out_lane::send(const std::vector<uint8_t>& frame) {
  std::lock_guard<std::mutex> lk{mtx_};
  if (!open_ || over_) return outcome::closed;
  if (queued_total_ != written_total_ && !write_pending()) {
    broke();
    return outcome::closed;
  }
  if (queued_total_ == written_total_) {
    // Nothing waits: the kernel takes what fits now; the rest waits, and so does every later
    // frame, so nothing can land inside it.
    size_t sent = 0;
    if (!write_from(frame.data(), frame.size(), sent)) {
      broke();
      return outcome::closed;
    }
    frames_accepted_++;
    bytes_accepted_ += frame.size();
    if (sent == frame.size()) return outcome::written;
    pending_.assign(frame.begin() + static_cast<ptrdiff_t>(sent), frame.end());
    sent_ = 0;
    queued_total_ += frame.size() - sent;
    frame_ends_.push_back(queued_total_);
    return outcome::queued;
  }
  if (queued_total_ - frame_ends_.front() > limit_) {
    over_ = true;
    pending_ = {};
    return outcome::over_limit;
  }
  frames_accepted_++;
  bytes_accepted_ += frame.size();
  pending_.insert(pending_.end(), frame.begin(), frame.end());
  queued_total_ += frame.size();
  frame_ends_.push_back(queued_total_);
  return outcome::queued;
}

bool out_lane::flush() {
  std::lock_guard<std::mutex> lk{mtx_};
  if (!open_ || over_ || queued_total_ == written_total_) return false;
  if (!write_pending()) {
    broke();
    return false;
  }
  return queued_total_ != written_total_;
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

uint64_t out_lane::taken() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return bytes_accepted_ - (queued_total_ - written_total_);
}

int out_lane::failure() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return failure_;
}

void out_lane::abort() {
  std::lock_guard<std::mutex> lk{mtx_};
  end();
}

void out_lane::close() {
  std::lock_guard<std::mutex> lk{mtx_};
  if (open_ && !over_ && queued_total_ != written_total_) write_pending();
  end();
}

}  // namespace fusee::server
