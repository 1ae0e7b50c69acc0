// The messages a node keeps for a peer that is not up: one per (sender shard, outbox id), a
// resend replacing the copy held, bounded in number and bytes, all handed over at once.
#include <doctest/doctest.h>

#include "actors/cluster/held_messages.hpp"

using fusee::server::held_messages;
using fusee::server::remote_message;

namespace {

remote_message message(uint32_t from, uint64_t outbox, size_t bytes, uint64_t epoch = 1) {
  return remote_message{7, from, epoch, outbox, fusee::proto::bytes(bytes, 'x')};
}

}  // namespace

TEST_CASE("a resend of a message held replaces it: held once, with the resend's bytes") {
  held_messages h;
  CHECK(h.hold(message(1, 5, 100)));
  CHECK(h.hold(message(1, 5, 40, 2)));  // resent by a later holder of shard 1
  CHECK(h.hold(message(2, 5, 10)));     // another sender's outbox 5
  CHECK(h.size() == 2);
  CHECK(h.bytes() == 50);
  auto all = h.take();
  REQUIRE(all.size() == 2);
  CHECK(all[0].from == 1);
  CHECK(all[0].from_epoch == 2);
  CHECK(all[0].payload.size() == 40);
  CHECK(all[1].from == 2);
  CHECK(h.empty());
  CHECK(h.bytes() == 0);
}

TEST_CASE("past the number of messages a new one is not held, but a resend of one held still "
          "replaces it") {
  held_messages h(2, 1000);
  CHECK(h.hold(message(1, 1, 10)));
  CHECK(h.hold(message(1, 2, 10)));
  CHECK_FALSE(h.hold(message(1, 3, 10)));
  CHECK(h.hold(message(1, 2, 20)));
  CHECK(h.size() == 2);
  CHECK(h.bytes() == 30);
}

TEST_CASE("past the bytes a message is not held, and a larger resend leaves the copy held") {
  held_messages h(100, 100);
  CHECK(h.hold(message(1, 1, 60)));
  CHECK(h.hold(message(1, 2, 40)));  // exactly the bound
  CHECK_FALSE(h.hold(message(1, 3, 1)));
  CHECK_FALSE(h.hold(message(1, 2, 41)));
  CHECK(h.bytes() == 100);
  auto all = h.take();
  REQUIRE(all.size() == 2);
  CHECK(all[1].payload.size() == 40);
  CHECK(h.hold(message(1, 3, 100)));  // room again once taken
}
