// Group commit's hold (actors/wal/commit_hold.hpp) at its boundaries, without a clock.
#include <doctest/doctest.h>

#include "actors/wal/commit_hold.hpp"

using fusee::server::commit_hold;
using sessions = std::vector<fusee::server::session_id>;

namespace {

constexpr int64_t us = 1000;

/// Arms `h` at 0 for sessions 1 and 2 after a 200 µs commit and lets it run out: a miss.
void miss(commit_hold& h) {
  h.arm(sessions{1, 2}, 0, 200 * us);
  REQUIRE(h.armed());
  REQUIRE(h.hold_ns(0, true) == 200 * us);
  REQUIRE(h.hold_ns(200 * us, true) == 0);
}

}  // namespace

TEST_CASE("a hold waits for every session the report told, and ends as the last one appends") {
  commit_hold h;
  h.arm(sessions{1, 2, 3}, 1000 * us, 200 * us);
  h.appended(1);
  CHECK(h.hold_ns(1050 * us, true) == 150 * us);
  h.appended(3);
  CHECK(h.hold_ns(1100 * us, true) == 100 * us);
  h.appended(2);
  CHECK(h.hold_ns(1120 * us, true) == 0);
  CHECK_FALSE(h.armed());
  CHECK(h.met() == 1);
  CHECK(h.missed() == 0);
}

TEST_CASE("appends of sessions the report did not tell neither end nor shorten a hold") {
  commit_hold h;
  h.arm(sessions{1}, 0, 200 * us);
  h.appended(9);
  CHECK(h.hold_ns(10 * us, true) == 190 * us);
}

TEST_CASE("sessions that all appended before anyone asked to commit leave nothing to hold") {
  commit_hold h;
  h.arm(sessions{1, 2}, 0, 200 * us);
  h.appended(2);
  h.appended(1);
  CHECK(h.hold_ns(5 * us, true) == 0);
  CHECK(h.met() == 0);  // nobody was held
  CHECK(h.missed() == 0);
}

TEST_CASE("a hold lasts as long as the last commit took, and never more than 1 ms") {
  commit_hold h;
  h.arm(sessions{1}, 0, 300 * us);
  CHECK(h.hold_ns(0, true) == 300 * us);
  CHECK(h.hold_ns(300 * us - 1, true) == 1);
  CHECK(h.hold_ns(300 * us, true) == 0);
  commit_hold slow;
  slow.arm(sessions{1}, 0, 20'000 * us);  // a stalled disk's commit is no pace to match
  CHECK(slow.hold_ns(0, true) == commit_hold::max_window_ns);
}

TEST_CASE("nothing is held before the first commit, for nobody told, or for more than 64 "
          "sessions") {
  commit_hold h;
  h.arm(sessions{1}, 0, 0);
  CHECK_FALSE(h.armed());
  h.arm(sessions{}, 0, 200 * us);
  CHECK_FALSE(h.armed());
  sessions many;
  for (uint64_t s = 1; s <= commit_hold::max_awaited + 1; ++s)
    many.push_back(s);
  h.arm(many, 0, 200 * us);
  CHECK_FALSE(h.armed());
  many.pop_back();
  h.arm(many, 0, 200 * us);
  CHECK(h.armed());
}

TEST_CASE("anything but appends queued (a grant, revocation, checkpoint, load or read) is "
          "committed at once, and that is no miss") {
  commit_hold h;
  h.arm(sessions{1, 2}, 0, 200 * us);
  CHECK(h.hold_ns(10 * us, true) > 0);
  CHECK(h.hold_ns(20 * us, false) == 0);
  CHECK_FALSE(h.armed());
  CHECK(h.missed() == 0);
  h.arm(sessions{1}, 300 * us, 200 * us);  // no back-off: the next report arms again
  CHECK(h.armed());
}

TEST_CASE("a window that ran out before anyone asked to commit held nobody, and is no miss") {
  commit_hold h;
  h.arm(sessions{1}, 0, 200 * us);
  CHECK(h.hold_ns(500 * us, true) == 0);
  CHECK(h.missed() == 0);
  CHECK(h.skipping() == 0);
}

TEST_CASE("a committer that takes the queue ends the hold") {
  commit_hold h;
  h.arm(sessions{1}, 0, 200 * us);
  CHECK(h.hold_ns(0, true) > 0);
  h.taken();
  CHECK_FALSE(h.armed());
  CHECK(h.hold_ns(10 * us, true) == 0);
}

TEST_CASE("after a miss the next 1, 2, 4 ... 64 reports arm no hold, and a hold every session "
          "met ends the back-off") {
  commit_hold h;
  for (uint32_t skip : {1u, 2u, 4u, 8u, 16u, 32u, 64u, 64u}) {
    miss(h);
    CHECK(h.skipping() == skip);
    for (uint32_t i = 0; i < skip; ++i) {
      h.arm(sessions{1}, 0, 200 * us);
      CHECK_FALSE(h.armed());
    }
  }
  CHECK(h.missed() == 8);
  h.arm(sessions{1}, 0, 200 * us);  // met: the back-off is over
  CHECK(h.hold_ns(0, true) > 0);
  h.appended(1);
  CHECK(h.hold_ns(10 * us, true) == 0);
  CHECK(h.met() == 1);
  miss(h);
  CHECK(h.skipping() == 1);
}

TEST_CASE("a report that told nobody neither arms a hold nor uses up the back-off") {
  commit_hold h;
  miss(h);
  REQUIRE(h.skipping() == 1);
  h.arm(sessions{}, 0, 200 * us);  // e.g. a batch of grants only
  CHECK(h.skipping() == 1);
  h.arm(sessions{1}, 0, 200 * us);  // the report the back-off skips
  CHECK_FALSE(h.armed());
  CHECK(h.skipping() == 0);
}

TEST_CASE("a hold met while a committer waited counts once, whoever takes the queue then") {
  commit_hold h;
  h.arm(sessions{1}, 0, 200 * us);
  CHECK(h.hold_ns(0, true) > 0);
  h.appended(1);  // the writer thread may take the queue before any I/O thread asks again
  h.taken();
  CHECK(h.met() == 1);
  CHECK(h.hold_ns(10 * us, true) == 0);
  CHECK(h.met() == 1);
}

TEST_CASE("a minimum window (tests' fast disks) lengthens a short commit's hold, a long one's "
          "stays within 1 ms") {
  commit_hold h{50'000 * us};
  h.arm(sessions{1}, 0, 10 * us);
  CHECK(h.hold_ns(0, true) == 50'000 * us);
  commit_hold normal;
  normal.arm(sessions{1}, 0, 10 * us);
  CHECK(normal.hold_ns(0, true) == 10 * us);
}
