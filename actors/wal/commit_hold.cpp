#include "actors/wal/commit_hold.hpp"

#include <algorithm>

namespace fusee::server {

void commit_hold::arm(const std::vector<session_id>& told, int64_t now, int64_t commit_ns) {
  if (told.empty()) return;
  armed_ = false;
  if (skip_ > 0) {
    --skip_;
    return;
  }
  if (told.size() > max_awaited || commit_ns <= 0) return;
  awaited_.assign(told.begin(), told.end());
  since_ = now;
  window_ = std::clamp(commit_ns, min_window_, std::max(min_window_, max_window_ns));
  armed_ = true;
  held_ = false;
}

void commit_hold::appended(session_id session) {
  if (!armed_) return;
  auto i = std::find(awaited_.begin(), awaited_.end(), session);
  if (i == awaited_.end()) return;
  *i = awaited_.back();
  awaited_.pop_back();
  if (!awaited_.empty()) return;
  // Every session told has appended again (before anyone asked, or while a committer waited).
  armed_ = false;
  if (held_) met_++;
  backoff_ = 0;
}

int64_t commit_hold::hold_ns(int64_t now, bool only_appends) {
  if (!armed_) return 0;
  if (!only_appends) {  // no verdict: something else is not to wait
    armed_ = false;
    return 0;
  }
  if (now - since_ < window_) {
    held_ = true;
    return since_ + window_ - now;
  }
  armed_ = false;
  if (held_) {  // held for sessions that did not come in time
    missed_++;
    backoff_ = std::min(max_skip, backoff_ == 0 ? 1 : backoff_ * 2);
    skip_ = backoff_;
  }
  return 0;
}

}  // namespace fusee::server
