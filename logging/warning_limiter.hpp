// Warnings a peer can repeat at will (a refused connection, a malformed request, a token that
// does not match): the first of each kind is logged, then one a minute, so that a flood cannot
// fill the log and push real problems off the dashboard, while another kind still shows at once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace fusee::server::logging {

class warning_limiter {
public:
  using clock = std::chrono::steady_clock;

  /// Remembers at most `max_keys` kinds; past that it forgets them all (each is said again once).
  explicit warning_limiter(size_t max_keys = 10000) : max_keys_(max_keys) {}

  /// Whether a line of kind `key` at `now` is to be logged as a warning: the first of its kind,
  /// or a minute or more after the last that was. If so, `*unsaid` (when given) is set to the
  /// lines of this kind that were not, since then. Any thread.
  bool admit(const std::string& key, clock::time_point now, uint64_t* unsaid = nullptr);
  bool admit(const std::string& key, uint64_t* unsaid = nullptr) {
    return admit(key, clock::now(), unsaid);
  }

  /// `line` as a warning when admit(key) lets it through (with the count of the lines not
  /// logged since the last, if any), else at debug, or not at all without `rest_at_debug`.
  void warn(const std::string& key, const std::string& line, bool rest_at_debug = true);

private:
  struct kind {
    clock::time_point said;
    uint64_t unsaid = 0;
  };
  std::mutex mu_;
  std::unordered_map<std::string, kind> kinds_;
  size_t max_keys_;
};

}  // namespace fusee::server::logging
