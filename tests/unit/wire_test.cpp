#include <doctest/doctest.h>

#include "protocol/wire.hpp"
#include "test_util.hpp"

using namespace fusee::proto;
using fusee::test::from_hex;

namespace {

bytes varint_bytes(uint64_t v) {
  bytes out;
  writer{out}.varint(v);
  return out;
}

std::optional<uint64_t> read_varint(const bytes& in, std::string* err = nullptr) {
  reader r{in};
  uint64_t v = 0;
  if (!r.varint(v, "v")) {
    if (err) *err = r.error()->message;
    return std::nullopt;
  }
  if (r.remaining() != 0) return std::nullopt;
  return v;
}

}  // namespace

TEST_CASE("integers are little-endian") {
  bytes out;
  writer w{out};
  w.u8(0xAB);
  w.u16(0x0102);
  w.u32(0x01020304);
  w.u64(0x0102030405060708ull);
  CHECK(out == from_hex("ab 0201 04030201 0807060504030201"));
  reader r{out};
  uint8_t a;
  uint16_t b;
  uint32_t c;
  uint64_t d;
  REQUIRE(r.u8(a, "a"));
  REQUIRE(r.u16(b, "b"));
  REQUIRE(r.u32(c, "c"));
  REQUIRE(r.u64(d, "d"));
  CHECK(a == 0xAB);
  CHECK(b == 0x0102);
  CHECK(c == 0x01020304);
  CHECK(d == 0x0102030405060708ull);
  CHECK(r.remaining() == 0);
}

TEST_CASE("varints are minimal LEB128") {
  CHECK(varint_bytes(0) == from_hex("00"));
  CHECK(varint_bytes(127) == from_hex("7f"));
  CHECK(varint_bytes(128) == from_hex("8001"));
  CHECK(varint_bytes(300) == from_hex("ac02"));
  CHECK(varint_bytes(~0ull) == from_hex("ffffffffffffffffff01"));
  for (uint64_t v : {0ull, 1ull, 127ull, 128ull, 16383ull, 16384ull, 1ull << 35, 1ull << 63, ~0ull})
    CHECK(read_varint(varint_bytes(v)) == v);
}

TEST_CASE("overlong, overflowing and truncated varints are errors") {
  std::string err;
  CHECK_FALSE(read_varint(from_hex("8000"), &err));  // 0 in two bytes
  CHECK(err.find("overlong") != std::string::npos);
  CHECK_FALSE(read_varint(from_hex("ff00")));                        // 127 in two bytes
  CHECK_FALSE(read_varint(from_hex("ffffffffffffffffff02"), &err));  // 2^64
  CHECK(err.find("exceeds") != std::string::npos);
  CHECK_FALSE(read_varint(from_hex("ffffffffffffffffff81")));  // 11 bytes
  CHECK_FALSE(read_varint(from_hex("80808080808080808080")));
  CHECK_FALSE(read_varint(from_hex("80"), &err));  // truncated
  CHECK(err.find("past the body") != std::string::npos);
  CHECK_FALSE(read_varint(from_hex("")));
}

TEST_CASE("bytes and str are length-prefixed, and str must be UTF-8") {
  bytes out;
  writer w{out};
  w.str("héllo");
  w.blob(from_hex("00ff"));
  CHECK(out == from_hex("06 68c3a96c6c6f 02 00ff"));
  reader r{out};
  std::string s;
  bytes b;
  REQUIRE(r.str(s, "s"));
  REQUIRE(r.blob(b, "b"));
  CHECK(s == "héllo");
  CHECK(b == from_hex("00ff"));

  auto bad = from_hex("02 c328");  // invalid UTF-8 sequence
  reader r2{bad};
  CHECK_FALSE(r2.str(s, "name"));
  CHECK(r2.error()->code == fusee::proto::err_code::bad_body);
  CHECK(r2.error()->message.find("UTF-8") != std::string::npos);

  auto longer = from_hex("05 6162");  // claims 5, has 2
  reader r3{longer};
  CHECK_FALSE(r3.blob(b, "payload"));
  CHECK(r3.error()->message.find("payload") != std::string::npos);
}

TEST_CASE("reads past the end fail and stick") {
  auto in = from_hex("010203");
  reader r{in};
  uint32_t v = 0;
  CHECK_FALSE(r.u32(v, "count"));
  CHECK(r.error()->message.find("count") != std::string::npos);
  uint8_t b = 0;
  CHECK_FALSE(r.u8(b, "next"));  // the first failure sticks
  CHECK(r.error()->message.find("count") != std::string::npos);
}

TEST_CASE("a list count larger than the bytes left is refused before any allocation") {
  auto in = from_hex("ffffffff 00");
  reader r{in};
  uint32_t n = 0;
  CHECK_FALSE(r.count(n, 1, "records"));
  CHECK(r.error()->message.find("cannot fit") != std::string::npos);
}
