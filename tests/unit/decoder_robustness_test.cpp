// The decoders meet truncated, re-chunked and random input: no crash, a clear error, no frame
// invented. (ASan/UBSan builds run these too; tests/fuzz goes further.)
#include <doctest/doctest.h>

#include "protocol/messages.hpp"
#include "samples.hpp"
#include "test_util.hpp"

using namespace fusee::proto;

namespace {

bytes sample_stream() {
  bytes out;
  for (const auto& m : fusee::test::sample_messages())
    append_frame(out, m);
  return out;
}

/// Feeds `stream` in the given chunk sizes; returns the frames and whether an error occurred.
std::pair<std::vector<frame>, bool> run(const bytes& stream, const std::vector<size_t>& chunks) {
  frame_decoder d;
  std::vector<frame> got;
  size_t pos = 0;
  for (size_t c : chunks) {
    d.feed(stream.data() + pos, c);
    pos += c;
    for (;;) {
      auto r = d.next();
      if (!r) return {got, true};
      if (!*r) break;
      got.push_back(std::move(**r));
    }
  }
  return {got, false};
}

}  // namespace

TEST_CASE("every prefix of a valid stream yields only the whole frames in it") {
  auto stream = sample_stream();
  auto samples = fusee::test::sample_messages();
  std::vector<size_t> ends;  // where each frame ends
  {
    size_t pos = 0;
    for (const auto& m : samples) {
      pos += encode(m).size();
      ends.push_back(pos);
    }
  }
  for (size_t len = 0; len <= stream.size(); ++len) {
    auto [frames, failed] = run(stream, {len});
    REQUIRE_FALSE(failed);
    size_t whole = 0;
    while (whole < ends.size() && ends[whole] <= len)
      ++whole;
    REQUIRE(frames.size() == whole);
  }
}

TEST_CASE("every prefix of every body fails to decode with BAD_BODY, never crashes") {
  for (const auto& m : fusee::test::sample_messages()) {
    bytes body;
    encode_body(m, body);
    auto k = static_cast<uint8_t>(kind_of(m));
    CAPTURE(kind_name(k));
    for (size_t len = 0; len < body.size(); ++len) {
      auto r = decode(k, byte_view{body.data(), len});
      if (k == static_cast<uint8_t>(kind::ok) && len >= 8)
        continue;  // OK's payload is free-form: any prefix past the id is an OK
      REQUIRE_FALSE(r.has_value());
      CHECK(r.err().code == err_code::bad_body);
      CHECK_FALSE(r.err().message.empty());
    }
  }
}

TEST_CASE("random chunkings of a valid stream give the same frames") {
  auto stream = sample_stream();
  auto& gen = fusee::test::rng();
  auto [reference, failed] = run(stream, {stream.size()});
  REQUIRE_FALSE(failed);
  for (int round = 0; round < 200; ++round) {
    std::vector<size_t> chunks;
    size_t left = stream.size();
    while (left > 0) {
      size_t c = std::min<size_t>(left, 1 + gen() % 64);
      chunks.push_back(c);
      left -= c;
    }
    auto [frames, bad] = run(stream, chunks);
    REQUIRE_FALSE(bad);
    REQUIRE(frames.size() == reference.size());
    for (size_t i = 0; i < frames.size(); ++i) {
      CHECK(frames[i].kind == reference[i].kind);
      CHECK(frames[i].body == reference[i].body);
    }
  }
}

TEST_CASE("random bytes: the frame decoder fails with BAD_FRAME or TOO_LARGE, never crashes") {
  auto& gen = fusee::test::rng();
  for (int round = 0; round < 2000; ++round) {
    bytes junk(1 + gen() % 200);
    for (auto& b : junk)
      b = static_cast<uint8_t>(gen());
    if (round % 2 == 0 && junk.size() >= 4)
      std::copy_n("FSE1", 4, junk.begin());  // get past the magic half of the time
    frame_decoder d;
    d.feed(junk);
    for (;;) {
      auto r = d.next();
      if (!r) {
        CHECK((r.err().code == err_code::bad_frame || r.err().code == err_code::too_large));
        CHECK_FALSE(r.err().message.empty());
        break;
      }
      if (!*r) break;
    }
  }
}

TEST_CASE("random bodies: every kind's decoder returns a value or a clear error") {
  auto& gen = fusee::test::rng();
  for (int round = 0; round < 20000; ++round) {
    bytes body(gen() % 120);
    for (auto& b : body)
      b = static_cast<uint8_t>(gen() % 4 == 0 ? 0xFF : gen() % 8);  // small values parse further
    auto k = static_cast<uint8_t>(gen() % 128);
    auto r = decode(k, body);
    if (r) {
      // Whatever decodes is valid and re-encodes to the same bytes.
      CHECK_FALSE(validate(*r));
      bytes again;
      encode_body(*r, again);
      CHECK(again == body);
    } else {
      CHECK_FALSE(r.err().message.empty());
    }
  }
}

TEST_CASE("mutated valid bodies never crash and re-encode exactly when they decode") {
  auto& gen = fusee::test::rng();
  for (const auto& m : fusee::test::sample_messages()) {
    bytes body;
    encode_body(m, body);
    auto k = static_cast<uint8_t>(kind_of(m));
    for (int round = 0; round < 300; ++round) {
      bytes x = body;
      int edits = 1 + static_cast<int>(gen() % 3);
      for (int e = 0; e < edits && !x.empty(); ++e)
        x[gen() % x.size()] = static_cast<uint8_t>(gen());
      auto r = decode(k, x);
      if (r) {
        bytes again;
        encode_body(*r, again);
        CHECK(again == x);
      }
    }
  }
}
