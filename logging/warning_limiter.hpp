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
  /// At most `new_per_minute` kinds of each sort (a key's first word: "auth", "closed", ...)
  /// are said for the first time within a minute: a peer that varies the key (many source
  /// addresses) gets one more warning saying so, then debug lines, and other sorts of warning
  /// still show.
  explicit warning_limiter(size_t max_keys = 10000, size_t new_per_minute = 100)
      : max_keys_(max_keys), new_per_minute_(new_per_minute) {}

  enum class verdict {
    warn,       ///< the first of its kind, or a minute or more after the last one said
    held,       ///< said less than a minute ago: held back (counted)
    new_flood,  ///< the first new kind past the minute's budget: say that kinds flood
    flooded,    ///< a later new kind past the budget: held back
  };
  /// What to do with a line of kind `key` at `now`. On `warn`, `*unsaid` (when given) is set to
  /// the lines of this kind held back since the last said. Any thread.
  verdict judge(const std::string& key, clock::time_point now, uint64_t* unsaid = nullptr);

  /// Whether a line of kind `key` at `now` is to be logged as a warning (judge() says `warn`).
  bool admit(const std::string& key, clock::time_point now, uint64_t* unsaid = nullptr) {
    return judge(key, now, unsaid) == verdict::warn;
  }
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
  size_t new_per_minute_;
  struct window {
    clock::time_point began;  ///< when the minute of new kinds began
    size_t new_kinds = 0;
  };
  std::unordered_map<std::string, window> sorts_;  ///< by a key's first word
};

}  // namespace fusee::server::logging
