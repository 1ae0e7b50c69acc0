#include "protocol/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace fusee::proto {

namespace {

constexpr uint32_t poly = 0x82F63B78u;

using table_t = std::array<std::array<uint32_t, 256>, 8>;

constexpr table_t make_tables() {
  table_t t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k)
      c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t s = 1; s < 8; ++s)
      t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  return t;
}

constexpr table_t tables = make_tables();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = ~crc;
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c = _mm_crc32_u64(c, w);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<uint32_t>(c);
  while (n-- > 0)
    c32 = _mm_crc32_u8(c32, *p++);
  return ~c32;
}

bool detect_sse42() {
  __builtin_cpu_init();  // required when this may run during static initialisation
  return __builtin_cpu_supports("sse4.2");
}

const bool has_sse42 = detect_sse42();
#endif

}  // namespace

uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc) {
  auto p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian host assumed (x86_64, aarch64)
    c = tables[7][lo & 0xFF] ^ tables[6][(lo >> 8) & 0xFF] ^ tables[5][(lo >> 16) & 0xFF] ^
        tables[4][lo >> 24] ^ tables[3][hi & 0xFF] ^ tables[2][(hi >> 8) & 0xFF] ^
        tables[1][(hi >> 16) & 0xFF] ^ tables[0][hi >> 24];
    p += 8;
    size -= 8;
  }
  while (size-- > 0)
    c = (c >> 8) ^ tables[0][(c ^ *p++) & 0xFF];
  return ~c;
}

bool crc32c_hardware() {
#if defined(__x86_64__)
  return has_sse42;
#else
  return false;
#endif
}

uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
#if defined(__x86_64__)
  if (has_sse42) return crc32c_sse42(static_cast<const uint8_t*>(data), size, crc);
#endif
  return crc32c_portable(data, size, crc);
}

}  // namespace fusee::proto
