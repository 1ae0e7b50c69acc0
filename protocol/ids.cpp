#include "protocol/ids.hpp"

#include <cstdio>
#include <cstdlib>

#include <openssl/rand.h>

#include "protocol/hex.hpp"

namespace fusee::proto {

std::string format_invocation_id(invocation_id id) {
  uint8_t be[8];
  for (int i = 0; i < 8; ++i)
    be[i] = static_cast<uint8_t>(id.value() >> (56 - 8 * i));
  return to_hex(be, sizeof(be));
}

std::optional<invocation_id> parse_invocation_id(std::string_view text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    int d = hex_digit(c);
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  if (v == 0) return std::nullopt;
  return invocation_id{v};
}

invocation_id random_invocation_id() {
  for (;;) {
    uint64_t v = 0;
    if (RAND_bytes(reinterpret_cast<unsigned char*>(&v), sizeof(v)) != 1) {
      std::fputs("fusee: OpenSSL RAND_bytes failed; cannot make invocation ids\n", stderr);
      std::abort();
    }
    if (v != 0) return invocation_id{v};
  }
}

}  // namespace fusee::proto
