// The invoker's decisions, deterministic: backoff, endpoint choice, grouping.
#include <doctest/doctest.h>

#include <random>
#include <set>

#include "actors/invoker_rules.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

using namespace fusee::server::rules;
namespace proto = fusee::proto;

TEST_CASE("backoff doubles per failure, is capped, and jitters within ±20 %") {
  std::mt19937_64 rng{7};
  for (uint32_t n = 1; n <= 12; ++n) {
    int64_t nominal = std::min<int64_t>(100LL << (n - 1), 30000);
    for (int k = 0; k < 200; ++k) {
      auto d = backoff(n, failure_base, failure_cap, rng()).count();
      CAPTURE(n);
      CHECK(d >= nominal * 8 / 10);
      CHECK(d <= nominal * 12 / 10);
    }
  }
  // The cap holds for any count, including absurd ones.
  CHECK(backoff(1000, failure_base, failure_cap, rng()).count() <= 36000);
  // No progress: 1 s doubling to 300 s.
  CHECK(backoff(1, no_progress_base, no_progress_cap, rng()).count() >= 800);
  CHECK(backoff(1, no_progress_base, no_progress_cap, rng()).count() <= 1200);
  CHECK(backoff(20, no_progress_base, no_progress_cap, rng()).count() >= 240000);
  CHECK(backoff(20, no_progress_base, no_progress_cap, rng()).count() <= 360000);
}

TEST_CASE("the jitter is spread, not constant") {
  std::mt19937_64 rng{11};
  std::set<int64_t> seen;
  for (int k = 0; k < 100; ++k)
    seen.insert(backoff(3, failure_base, failure_cap, rng()).count());
  CHECK(seen.size() > 20);
}

TEST_CASE("endpoint choice follows the original's order of rules") {
  std::vector<std::vector<std::string>> eps{{}, {"order"}, {"payment", "order"}};
  // 1. a waiting start's type wins
  CHECK(choose_endpoint(eps, {"payment"}, {}, 0) == 2);
  CHECK(choose_endpoint(eps, {"order"}, {}, 2) == 1);  // the first endpoint with the type
  // 2. code for types the last holder lacked, on another endpoint than the last
  CHECK(choose_endpoint(eps, {}, {"order"}, 1) == 2);
  CHECK(choose_endpoint(eps, {}, {"order"}, 2) == 1);
  // 3. else the last endpoint
  CHECK(choose_endpoint(eps, {}, {}, 2) == 2);
  CHECK(choose_endpoint(eps, {}, {"unknown"}, 1) == 1);
  // 4. else one with no types
  CHECK(choose_endpoint(eps, {}, {}, -1) == 0);
  std::vector<std::vector<std::string>> typed{{"a"}, {"b"}};
  CHECK(choose_endpoint(typed, {}, {}, -1) == 0);  // nothing fits: the first
  CHECK(choose_endpoint(typed, {"b"}, {}, -1) == 1);
}

TEST_CASE("due shards are grouped into at most free-slot invocations of at most max_shards") {
  std::vector<uint32_t> shards{1, 2, 3, 4, 5, 6, 7};
  auto all = group(shards, 16, 0);
  REQUIRE(all.size() == 1);
  CHECK(all[0].size() == 7);
  auto by3 = group(shards, 16, 3);
  REQUIRE(by3.size() == 3);
  CHECK(by3[0] == std::vector<uint32_t>{1, 2, 3});
  CHECK(by3[2] == std::vector<uint32_t>{7});
  auto two_slots = group(shards, 2, 2);
  REQUIRE(two_slots.size() == 2);  // shards 5-7 wait for a slot
  CHECK(two_slots[1] == std::vector<uint32_t>{3, 4});
  CHECK(group(shards, 0, 0).empty());
  CHECK(group({}, 4, 0).empty());
}

TEST_CASE("a POST's deadline is budget + grace, saturating instead of wrapping") {
  CHECK(answer_deadline_ms(60'000, 30'000) == 90'000);
  CHECK(answer_deadline_ms(60'000, 4'294'967'295u) == 4'294'967'295u);  // "never", not 59,999
  CHECK(answer_deadline_ms(4'294'967'295u, 1) == 4'294'967'295u);       // not 0 (no deadline)
}

TEST_CASE("an invocation's POST must begin before the last tenth of its budget (at most 1 s), or "
          "it is not sent") {
  CHECK(send_within_ms(60'000) == 59'000);
  CHECK(send_within_ms(5'000) == 4'500);
  CHECK(send_within_ms(100) == 90);
  CHECK(send_within_ms(1) == 1);  // never 0 (that would mean no deadline at all)
  CHECK(send_within_ms(4'294'967'295u) == 4'294'966'295u);
}

TEST_CASE("an invocation holds at most 10,000 shards per MiB of frame, so its IDLE fits one") {
  CHECK(invocation_shards(0, 96) == 960'000);
  CHECK(invocation_shards(0, 1) == 10'000);
  CHECK(invocation_shards(100, 96) == 100);
  CHECK(invocation_shards(20'000, 1) == 10'000);
  // The largest IDLE of that many shards, each with a 40-byte type, fits a frame.
  for (uint32_t mb : {1u, 16u, 96u}) {
    proto::idle idle;
    idle.entries.resize(
        invocation_shards(0, mb),
        proto::idle_entry{
            proto::shard_id{0}, proto::epoch_t{1}, 3, 1, 1, 1, {std::string(40, 't')}});
    proto::bytes frame;
    proto::append_frame(frame, proto::any_message{std::move(idle)});
    CHECK(frame.size() - proto::frame_header_size <= (uint64_t{mb} << 20));
  }
  // The scheduler groups with the rule's answer: never one group of every due shard.
  std::vector<uint32_t> shards(10'001);
  for (uint32_t i = 0; i < shards.size(); ++i)
    shards[i] = i;
  auto groups = group(shards, 4, invocation_shards(0, 1));
  REQUIRE(groups.size() == 2);
  CHECK(groups[1] == std::vector<uint32_t>{10'000});
}

TEST_CASE("earliest_timer keeps only the earliest pending tick and ignores stale ones") {
  earliest_timer t;
  auto now = std::chrono::steady_clock::time_point{} + std::chrono::hours(1);
  auto first = t.arm(now + ms{200});
  CHECK(first != 0);
  CHECK(t.arm(now + ms{300}) == 0);  // the pending tick comes earlier and re-arms then
  auto earlier = t.arm(now + ms{100});
  CHECK(earlier != 0);
  CHECK(earlier != first);
  CHECK_FALSE(t.fire(first));  // stale
  CHECK(t.fire(earlier));
  CHECK_FALSE(t.fire(earlier));      // once
  CHECK(t.arm(now + ms{300}) != 0);  // nothing pending: a later time arms
}

TEST_CASE("an endpoint backing off is probed for a waiting call only when none is in flight and "
          "nothing was sent to it or ended for a second") {
  using tp = std::chrono::steady_clock::time_point;
  tp t0{std::chrono::seconds(100)};
  CHECK(may_probe(true, false, t0, t0 + std::chrono::seconds(1)));
  CHECK_FALSE(may_probe(true, false, t0, t0 + ms{999}));
  CHECK_FALSE(may_probe(true, true, t0, t0 + std::chrono::seconds(5)));    // one probe at a time
  CHECK_FALSE(may_probe(false, false, t0, t0 + std::chrono::seconds(5)));  // nobody waits
}
