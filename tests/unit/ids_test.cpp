#include <doctest/doctest.h>

#include <set>
#include <type_traits>

#include "protocol/ids.hpp"
#include "protocol/shard_hash.hpp"

using namespace fusee::proto;

TEST_CASE("strong ids do not mix") {
  static_assert(!std::is_convertible_v<uint64_t, epoch_t>);
  static_assert(!std::is_convertible_v<epoch_t, lsn_t>);
  static_assert(!std::is_constructible_v<lsn_t, epoch_t>);
  CHECK(epoch_t{3} < epoch_t{4});
  CHECK(lsn_t{7} == lsn_t{7});
}

TEST_CASE("invocation ids are 16 lowercase hex digits and round trip") {
  CHECK(format_invocation_id(invocation_id{0x00f3a1c2b4d5e6f7}) == "00f3a1c2b4d5e6f7");
  CHECK(format_invocation_id(invocation_id{1}) == "0000000000000001");
  CHECK(parse_invocation_id("00f3a1c2b4d5e6f7") == invocation_id{0x00f3a1c2b4d5e6f7});
  CHECK(parse_invocation_id("ffffffffffffffff") == invocation_id{~0ull});
  CHECK_FALSE(parse_invocation_id("0000000000000000"));  // 0 is never issued
  CHECK_FALSE(parse_invocation_id("00F3A1C2B4D5E6F7"));  // upper case
  CHECK_FALSE(parse_invocation_id("f3a1c2b4d5e6f7"));    // short
  CHECK_FALSE(parse_invocation_id("00f3a1c2b4d5e6f70"));
  CHECK_FALSE(parse_invocation_id("00f3a1c2b4d5e6fg"));
  CHECK_FALSE(parse_invocation_id(""));
}

TEST_CASE("random invocation ids are nonzero and distinct") {
  std::set<uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    auto id = random_invocation_id();
    CHECK(id.value() != 0);
    seen.insert(id.value());
    CHECK(parse_invocation_id(format_invocation_id(id)) == id);
  }
  CHECK(seen.size() == 1000);
}

TEST_CASE("workflow id to shard is FNV-1a 64 mod shard_count") {
  // Published FNV-1a 64 test values.
  static_assert(fnv1a64("") == 0xcbf29ce484222325ull);
  CHECK(fnv1a64("a") == 0xaf63dc4c8601ec8cull);
  CHECK(fnv1a64("foobar") == 0x85944171f73967e8ull);
  CHECK(shard_for("foobar", 16) == shard_id{0x85944171f73967e8ull % 16});
  CHECK(shard_for("a", 1) == shard_id{0});
  CHECK(shard_for("order-42", 7) == shard_id{static_cast<uint32_t>(fnv1a64("order-42") % 7)});
  // UTF-8 bytes, not code points.
  CHECK(fnv1a64("\xc3\xa9") != fnv1a64("\xe9"));
}
