// Group commit's hold: once a batch's DURABLEs are out, the next commit may wait a little for the
// sessions they went to, so that their next appends join that batch instead of waiting a whole
// commit behind it. A rule without clock or lock: the log calls it under its queue's lock.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/lease_log.hpp"

namespace fusee::server {

class commit_hold {
public:
  /// A report to more sessions than this arms no hold (each queued append looks them up).
  static constexpr size_t max_awaited = 64;
  /// The longest hold, however long the last commit took (a stall is not a pace to match).
  static constexpr int64_t max_window_ns = 1'000'000;
  /// After consecutive misses, up to this many reports in a row arm no hold.
  static constexpr uint32_t max_skip = 64;

  /// `min_window_ns`: the shortest window (tests, whose disk may sync in µs; 0 in the server).
  explicit commit_hold(int64_t min_window_ns = 0) : min_window_(min_window_ns) {}

  /// The committer went idle at `now` after a report that told `told` DURABLE, and the write and
  /// fdatasync of that batch took `commit_ns`. Their next appends are awaited for as long as that
  /// commit took (at most max_window_ns): held that long, the appends already queued wait no longer
  /// than the late ones would have waited behind a commit without them. Not armed while misses
  /// back it off, for more than max_awaited sessions, or before any commit. A report that told
  /// nobody changes nothing.
  void arm(const std::vector<session_id>& told, int64_t now, int64_t commit_ns);
  /// An append of `session` was queued; the last one awaited ends the hold (met).
  void appended(session_id session);
  /// How long (ns) a committer that would take the queue at `now` waits first; 0: commit now.
  /// `only_appends`: nothing but appends is queued (a grant, revocation, checkpoint, load or read
  /// is never held). A hold that runs out with a session still awaited is a miss: the next 1, 2,
  /// 4 … max_skip reports arm none; a hold that every awaited session met ends the back-off.
  int64_t hold_ns(int64_t now, bool only_appends);
  /// A committer took the queue (whether or not it asked hold_ns): the hold is over.
  void taken() { armed_ = false; }

  bool armed() const { return armed_; }
  /// Reports left that arm no hold (the back-off after a miss).
  uint32_t skipping() const { return skip_; }
  /// Holds (that made a committer wait) ended by the last awaited append, and holds run out.
  uint64_t met() const { return met_; }
  uint64_t missed() const { return missed_; }

private:
  int64_t min_window_;
  std::vector<session_id> awaited_;
  int64_t since_ = 0;
  int64_t window_ = 0;
  bool armed_ = false;
  bool held_ = false;  ///< hold_ns returned a wait since arm()
  uint32_t backoff_ = 0;
  uint32_t skip_ = 0;
  uint64_t met_ = 0;
  uint64_t missed_ = 0;
};

}  // namespace fusee::server
