#include <doctest/doctest.h>

#include "protocol/crc32c.hpp"
#include "protocol/frame.hpp"
#include "test_util.hpp"

using namespace fusee::proto;
using fusee::test::from_hex;

namespace {

std::vector<frame> drain_all(frame_decoder& d) {
  std::vector<frame> out;
  for (;;) {
    auto r = d.next();
    REQUIRE(r.has_value());
    if (!*r) return out;
    out.push_back(std::move(**r));
  }
}

}  // namespace

TEST_CASE("a frame is magic, kind, length, crc of kind ++ body, body") {
  auto f = encode_frame(6, from_hex("0102"));
  REQUIRE(f.size() == frame_header_size + 2);
  CHECK(f[0] == 'F');
  CHECK(f[3] == '1');
  CHECK(f[4] == 6);
  CHECK(f[5] == 2);
  uint8_t kb[] = {6, 1, 2};
  uint32_t crc = crc32c(kb, 3);
  CHECK(f[9] == (crc & 0xFF));
  CHECK(f[12] == (crc >> 24));
}

TEST_CASE("the decoder yields whole frames from any chunking") {
  bytes stream;
  append_frame(stream, 1, from_hex("aa"));
  append_frame(stream, 2, bytes{});
  append_frame(stream, 64, bytes(1000, 0x5a));
  for (size_t chunk : {size_t{1}, size_t{2}, size_t{5}, size_t{13}, size_t{14}, size_t{4096}}) {
    CAPTURE(chunk);
    frame_decoder d;
    std::vector<frame> got;
    for (size_t i = 0; i < stream.size(); i += chunk) {
      d.feed(stream.data() + i, std::min(chunk, stream.size() - i));
      for (auto& f : drain_all(d))
        got.push_back(std::move(f));
    }
    REQUIRE(got.size() == 3);
    CHECK(got[0].kind == 1);
    CHECK(got[0].body == from_hex("aa"));
    CHECK(got[1].body.empty());
    CHECK(got[2].body == bytes(1000, 0x5a));
    CHECK(d.buffered() == 0);
  }
}

TEST_CASE("bad magic, bad checksum and oversize are distinct errors") {
  SUBCASE("bad magic fails as soon as the first wrong byte arrives") {
    frame_decoder d;
    d.feed(from_hex("46 53"));  // "FS"
    CHECK(d.next().has_value());
    d.feed(from_hex("58"));  // 'X'
    auto r = d.next();
    REQUIRE_FALSE(r.has_value());
    CHECK(r.err().code == err_code::bad_frame);
    CHECK(d.failure() == frame_error::bad_magic);
    CHECK(r.err().message.find("magic") != std::string::npos);
  }
  SUBCASE("bytes that are HTTP say so: an HTTP port dialled, or HTTP sent to this one") {
    auto said = [](std::string text) {
      frame_decoder d;
      d.feed(bytes(text.begin(), text.end()));
      auto r = d.next();
      REQUIRE_FALSE(r.has_value());
      CHECK(r.err().code == err_code::bad_frame);
      return r.err().message;
    };
    CHECK(said("HTTP/1.1 400 Bad Request\r\n").find("answered in HTTP") != std::string::npos);
    CHECK(said("GET / HTTP/1.1\r\n").find("HTTP request") != std::string::npos);
    CHECK(said("POST /v1/workflows").find("HTTP request") != std::string::npos);
    auto other = said("GETX");
    CHECK(other.find("HTTP") == std::string::npos);
    CHECK(other.find("FSE1") != std::string::npos);
  }
  SUBCASE("bad checksum") {
    auto f = encode_frame(2, from_hex("010203"));
    f.back() ^= 1;
    frame_decoder d;
    d.feed(f);
    auto r = d.next();
    REQUIRE_FALSE(r.has_value());
    CHECK(r.err().code == err_code::bad_frame);
    CHECK(d.failure() == frame_error::bad_checksum);
  }
  SUBCASE("a length over 96 MiB is refused from the header alone") {
    bytes hdr = from_hex("46534531 02");
    writer w{hdr};
    w.u32(max_body_size + 1);
    w.u32(0);
    frame_decoder d;
    d.feed(hdr);
    auto r = d.next();
    REQUIRE_FALSE(r.has_value());
    CHECK(r.err().code == err_code::too_large);
    CHECK(d.failure() == frame_error::too_large);
  }
  SUBCASE("exactly 96 MiB is allowed") {
    bytes hdr = from_hex("46534531 02");
    writer w{hdr};
    w.u32(max_body_size);
    w.u32(0);
    frame_decoder d;
    d.feed(hdr);
    auto r = d.next();
    REQUIRE(r.has_value());
    CHECK_FALSE(*r);  // waits for the body
  }
}

TEST_CASE("after a failure the decoder stays failed") {
  frame_decoder d;
  d.feed(from_hex("00"));
  CHECK_FALSE(d.next().has_value());
  d.feed(encode_frame(1, bytes{}));
  CHECK_FALSE(d.next().has_value());
}

TEST_CASE("peek_id reads the first 8 bytes") {
  CHECK(peek_id(from_hex("0100000000000000 ff")) == 1u);
  CHECK_FALSE(peek_id(from_hex("01000000000000")));
}
