#include <doctest/doctest.h>

#include <vector>

#include "protocol/crc32c.hpp"
#include "test_util.hpp"

using namespace fusee::proto;

namespace {

// RFC 3720 (iSCSI), appendix B.4: CRC32C test vectors of 32-byte buffers.
struct vector {
  const char* name;
  std::vector<uint8_t> data;
  uint32_t crc;
};

std::vector<vector> rfc3720_vectors() {
  std::vector<uint8_t> zeros(32, 0x00), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; ++i) {
    inc[i] = static_cast<uint8_t>(i);
    dec[i] = static_cast<uint8_t>(31 - i);
  }
  // An iSCSI SCSI Read (10) command PDU.
  auto pdu = fusee::test::from_hex("01 c0 00 00 00 00 00 00 00 00 00 00 00 00 00 00"
                                   "14 00 00 00 00 00 04 00 00 00 00 14 00 00 00 18"
                                   "28 00 00 00 00 00 00 00 02 00 00 00 00 00 00 00");
  return {{"32 bytes of zeros", zeros, 0x8A9136AA},
          {"32 bytes of ones", ones, 0x62A8AB43},
          {"32 incrementing bytes", inc, 0x46DD794E},
          {"32 decrementing bytes", dec, 0x113FDB5C},
          {"iSCSI read PDU", pdu, 0xD9963A56}};
}

}  // namespace

TEST_CASE("crc32c matches the RFC 3720 test vectors, in both implementations") {
  for (const auto& v : rfc3720_vectors()) {
    CAPTURE(v.name);
    CHECK(crc32c(v.data.data(), v.data.size()) == v.crc);
    CHECK(crc32c_portable(v.data.data(), v.data.size()) == v.crc);
  }
  CHECK(crc32c("123456789", 9) == 0xE3069283);  // the common check value
  CHECK(crc32c(nullptr, 0) == 0);
}

TEST_CASE("crc32c continues across chunks and agrees with the portable code at every length") {
  std::vector<uint8_t> data(1000);
  for (auto& b : data)
    b = static_cast<uint8_t>(fusee::test::rng()());
  for (size_t len = 0; len <= data.size(); len += 7) {
    uint32_t whole = crc32c_portable(data.data(), len);
    CHECK(crc32c(data.data(), len) == whole);
    size_t cut = len / 3;
    CHECK(crc32c(data.data() + cut, len - cut, crc32c(data.data(), cut)) == whole);
  }
}
