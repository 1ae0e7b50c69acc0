// Frames written by hand from PROTOCOL.md (CRCs computed by an independent bitwise CRC32C), so the
// format cannot drift silently. docs/protocol.md shows the same bytes.
#include <doctest/doctest.h>

#include "protocol/messages.hpp"
#include "test_util.hpp"

using namespace fusee::proto;
using fusee::test::from_hex;

namespace {

void check_golden(const any_message& m, std::string_view hex) {
  auto want = from_hex(hex);
  CHECK(encode(m) == want);
  frame_decoder d;
  d.feed(want);
  auto f = d.next();
  REQUIRE(f.has_value());
  REQUIRE(f->has_value());
  auto back = decode(**f);
  REQUIRE(back.has_value());
  CHECK(*back == m);
}

}  // namespace

TEST_CASE("golden HELLO") {
  // id 1, shard 0xFFFFFFFF, epoch 0, version 1, offers SERVE_CALLS, max_shards 0, name "w1",
  // types ["order"]
  check_golden(
      hello{request_head{1, no_shard, epoch_t{0}}, 1, offer_serve_calls, 0, {}, "w1", {"order"}},
      "46534531 01 2d000000 58862929"
      "0100000000000000 ffffffff 0000000000000000"
      "01000000 02000000 00000000 027731 01000000 056f72646572");
}

TEST_CASE("golden LEASE") {
  // id 1, 16 shards, ping 1000 ms, timeout 5000 ms, remaining 0, one grant: shard 3 epoch 7 lsn 0
  check_golden(lease{1, 16, 1000, 5000, 0, {grant_entry{shard_id{3}, epoch_t{7}, lsn_t{0}}}},
               "46534531 42 30000000 7249c857"
               "0100000000000000 10000000 e8030000 88130000 00000000"
               "01000000 03000000 0700000000000000 0000000000000000");
}

TEST_CASE("golden APPEND") {
  // id 0, shard 3, epoch 7, first_lsn 1, records ["step-1"]
  check_golden(append{request_head{0, shard_id{3}, epoch_t{7}},
                      lsn_t{1},
                      {bytes{'s', 't', 'e', 'p', '-', '1'}}},
               "46534531 02 27000000 c095a567"
               "0000000000000000 03000000 0700000000000000"
               "0100000000000000 01000000 06737465702d31");
}

TEST_CASE("golden DURABLE") {
  // push (id 0): shard 3 epoch 7 durable up to lsn 1
  check_golden(durable{0, {position{shard_id{3}, epoch_t{7}, lsn_t{1}}}},
               "46534531 44 20000000 347cf945"
               "0000000000000000 01000000 03000000 0700000000000000 0100000000000000");
}

TEST_CASE("golden CALL") {
  // id 5, shard 3, epoch 0, method "start", type "order", args {"n":1}, park_ms 30000
  check_golden(call{request_head{5, shard_id{3}, epoch_t{0}}, "start", "order",
                    bytes{'{', '"', 'n', '"', ':', '1', '}'}, 30000},
               "46534531 08 2c000000 aec827fa"
               "0500000000000000 03000000 0000000000000000"
               "057374617274 056f72646572 077b226e223a317d 30750000");
}

TEST_CASE("golden IDLE") {
  // id 9, one entry: shard 3 epoch 7 BUSY, nothing due, 12 steps, 250 us open, no types
  check_golden(idle{request_head{9, no_shard, epoch_t{0}},
                    {idle_entry{shard_id{3}, epoch_t{7}, idle_busy, nothing_due, 12, 250, {}}}},
               "46534531 0d 41000000 3059def6"
               "0900000000000000 ffffffff 0000000000000000 01000000"
               "03000000 0700000000000000 01 ffffffffffffffff 0c00000000000000 fa00000000000000"
               "00000000");
}
