#include "logging/warning_limiter.hpp"

#include <spdlog/spdlog.h>

namespace fusee::server::logging {

bool warning_limiter::admit(const std::string& key, clock::time_point now, uint64_t* unsaid) {
  std::lock_guard lk{mu_};
  if (kinds_.size() >= max_keys_ && kinds_.count(key) == 0) kinds_.clear();
  auto [it, fresh] = kinds_.try_emplace(key, kind{now, 0});
  if (!fresh && now - it->second.said < std::chrono::minutes(1)) {
    it->second.unsaid++;
    return false;
  }
  it->second.said = now;
  if (unsaid != nullptr) *unsaid = it->second.unsaid;
  it->second.unsaid = 0;
  return true;
}

void warning_limiter::warn(const std::string& key, const std::string& line, bool rest_at_debug) {
  uint64_t unsaid = 0;
  if (!admit(key, &unsaid)) {
    if (rest_at_debug) spdlog::debug("{}", line);
    return;
  }
  if (unsaid == 0)
    spdlog::warn("{}", line);
  else
    spdlog::warn("{} (and {} more like it since it was last logged: one a minute is)", line,
                 unsaid);
}

}  // namespace fusee::server::logging
