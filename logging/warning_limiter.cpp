#include "logging/warning_limiter.hpp"

#include <spdlog/spdlog.h>

namespace fusee::server::logging {

warning_limiter::verdict warning_limiter::judge(const std::string& key, clock::time_point now,
                                                uint64_t* unsaid) {
  std::lock_guard lk{mu_};
  auto it = kinds_.find(key);
  if (it == kinds_.end()) {  // a new kind: within the minute's budget of its sort?
    auto& w = sorts_[key.substr(0, key.find(' '))];
    if (w.new_kinds == 0 || now - w.began >= std::chrono::minutes(1)) {
      w.began = now;
      w.new_kinds = 0;
    }
    if (++w.new_kinds > new_per_minute_)  // not remembered: it is new again next time
      return w.new_kinds == new_per_minute_ + 1 ? verdict::new_flood : verdict::flooded;
    if (kinds_.size() >= max_keys_) kinds_.clear();
    kinds_.emplace(key, kind{now, 0});
    if (unsaid != nullptr) *unsaid = 0;
    return verdict::warn;
  }
  if (now - it->second.said < std::chrono::minutes(1)) {
    it->second.unsaid++;
    return verdict::held;
  }
  it->second.said = now;
  if (unsaid != nullptr) *unsaid = it->second.unsaid;
  it->second.unsaid = 0;
  return verdict::warn;
}

void warning_limiter::warn(const std::string& key, const std::string& line, bool rest_at_debug) {
  uint64_t unsaid = 0;
  switch (judge(key, clock::now(), &unsaid)) {
  case verdict::warn:
    if (unsaid == 0)
      spdlog::warn("{}", line);
    else
      spdlog::warn("{} (and {} more like it since it was last logged: one a minute is)", line,
                   unsaid);
    return;
  case verdict::new_flood:
    spdlog::warn("{} (and more: over {} kinds of such warnings began within a minute, a "
                 "flood from many peers or addresses? New kinds are logged at debug until the "
                 "minute is over)",
                 line, new_per_minute_);
    return;
  case verdict::held:
  case verdict::flooded:
    if (rest_at_debug) spdlog::debug("{}", line);
    return;
  }
}

}  // namespace fusee::server::logging
