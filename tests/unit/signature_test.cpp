#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "protocol/hex.hpp"
#include "protocol/signature.hpp"
#include "test_util.hpp"

using namespace fusee::proto;
using fusee::test::from_hex;
using fusee::test::to_bytes;

namespace {

std::string hex(const sha256_digest& d) {
  return to_hex(d.data(), d.size());
}

constexpr uint64_t t0 = 1764489600000;  // 2025-11-30T08:00:00Z in ms
const std::string body = R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3,9]})";

}  // namespace

TEST_CASE("HMAC-SHA256 matches the RFC 4231 test vectors") {
  // Test case 1
  CHECK(hex(hmac_sha256(bytes(20, 0x0b), to_bytes("Hi There"))) ==
        "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  // Test case 2
  CHECK(hex(hmac_sha256(to_bytes("Jefe"), to_bytes("what do ya want for nothing?"))) ==
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Test case 3
  CHECK(hex(hmac_sha256(bytes(20, 0xaa), bytes(50, 0xdd))) ==
        "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
  // Test case 4
  CHECK(hex(hmac_sha256(from_hex("0102030405060708090a0b0c0d0e0f10111213141516171819"),
                        bytes(50, 0xcd))) ==
        "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
  // Test case 5: truncated to 128 bits
  CHECK(hex(hmac_sha256(bytes(20, 0x0c), to_bytes("Test With Truncation"))).substr(0, 32) ==
        "a3b6167473100ee06e0c796c2955552b");
  // Test case 6: a key longer than the block size
  CHECK(hex(hmac_sha256(bytes(131, 0xaa),
                        to_bytes("Test Using Larger Than Block-Size Key - Hash Key First"))) ==
        "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
  // Test case 7
  CHECK(hex(hmac_sha256(bytes(131, 0xaa),
                        to_bytes("This is a test using a larger than block-size key and a larger "
                                 "than block-size data. The key needs to be hashed before being "
                                 "used by the HMAC algorithm."))) ==
        "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST_CASE("a signature is t=<ms>,v1=<hmac of \"<t>.\" + body>") {
  auto h = sign("s3cret", t0, body);
  auto mac = hmac_sha256(to_bytes("s3cret"), to_bytes(std::to_string(t0) + "." + body));
  CHECK(h == "t=" + std::to_string(t0) + ",v1=" + hex(mac));
  std::vector<std::string> secrets{"s3cret"};
  CHECK_FALSE(verify(h, body, secrets, t0));
}

TEST_CASE("the tolerance window applies in both directions") {
  std::vector<std::string> secrets{"k"};
  auto h = sign("k", t0, body);
  uint64_t tol = default_signature_tolerance_ms;
  CHECK_FALSE(verify(h, body, secrets, t0 + tol));  // exactly at the edge: accepted
  CHECK_FALSE(verify(h, body, secrets, t0 - tol));
  auto old = verify(h, body, secrets, t0 + tol + 1);
  REQUIRE(old);
  CHECK(old->reason == signature_error::too_old);
  auto future = verify(h, body, secrets, t0 - tol - 1);
  REQUIRE(future);
  CHECK(future->reason == signature_error::too_new);
  CHECK_FALSE(verify(h, body, secrets, t0 + 1000, 1000));
  CHECK(verify(h, body, secrets, t0 + 1001, 1000)->reason == signature_error::too_old);
}

TEST_CASE("tampered body, wrong secret, tampered digest and tampered time are mismatches") {
  std::vector<std::string> secrets{"k"};
  auto h = sign("k", t0, body);
  CHECK(verify(h, body + " ", secrets, t0)->reason == signature_error::mismatch);
  std::vector<std::string> other{"K"};
  CHECK(verify(h, body, other, t0)->reason == signature_error::mismatch);
  auto flipped = h;
  flipped.back() = flipped.back() == '0' ? '1' : '0';
  CHECK(verify(flipped, body, secrets, t0)->reason == signature_error::mismatch);
  auto shifted = sign("k", t0, body);
  shifted.replace(2, std::to_string(t0).size(), std::to_string(t0 + 1));
  CHECK(verify(shifted, body, secrets, t0)->reason == signature_error::mismatch);
}

TEST_CASE("secret rotation: several v1 entries and several secrets") {
  std::vector<std::string> both{"new", "old"};
  auto h = sign(both, t0, body);
  CHECK(std::count(h.begin(), h.end(), '=') == 3);
  std::vector<std::string> only_old{"old"}, only_new{"new"}, neither{"x"};
  CHECK_FALSE(verify(h, body, only_old, t0));
  CHECK_FALSE(verify(h, body, only_new, t0));
  CHECK(verify(h, body, neither, t0));
  // A verifier holding both secrets accepts a sender that still signs with the old one only.
  CHECK_FALSE(verify(sign("old", t0, body), body, both, t0));
}

TEST_CASE("malformed headers are refused as malformed") {
  std::vector<std::string> secrets{"k"};
  auto good_v1 = sign("k", t0, body).substr(sign("k", t0, body).find(",v1=") + 1);
  for (std::string h : {std::string{""}, std::string{"garbage"}, good_v1, "t=" + std::to_string(t0),
                        "t=" + std::to_string(t0) + ",v1=abc", "t=12x4," + good_v1, "t=," + good_v1,
                        "t=1,t=1," + good_v1, "t=" + std::to_string(t0) + ",," + good_v1,
                        "t=99999999999999999999999," + good_v1,
                        "t=" + std::to_string(t0) + ",v1=" + std::string(64, 'A')}) {
    CAPTURE(h);
    auto r = verify(h, body, secrets, t0);
    REQUIRE(r);
    CHECK(r->reason == signature_error::malformed);
    CHECK_FALSE(r->message.empty());
    auto head_only = check_header(h, t0);  // the same refusal before the body is read
    REQUIRE(head_only);
    CHECK(head_only->message == r->message);
  }
  // Unknown schemes are skipped, so a later v2 can ride along.
  auto h = sign("k", t0, body) + ",v2=whatever";
  CHECK_FALSE(verify(h, body, secrets, t0));
}

TEST_CASE("a header alone is checked for its form and its time, not for its digest") {
  auto h = sign("k", t0, body);
  CHECK_FALSE(check_header(h, t0));
  auto forged = "t=" + std::to_string(t0) + ",v1=" + std::string(64, '0');
  CHECK_FALSE(check_header(forged, t0));  // only the body can tell (verify: a mismatch)
  CHECK(verify(forged, body, std::vector<std::string>{"k"}, t0)->reason ==
        signature_error::mismatch);
  uint64_t tol = default_signature_tolerance_ms;
  CHECK(check_header(h, t0 + tol + 1)->reason == signature_error::too_old);
  CHECK(check_header(h, t0 - tol - 1)->reason == signature_error::too_new);
}
