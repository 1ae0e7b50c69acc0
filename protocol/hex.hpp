// Lowercase hex encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fusee::proto {

std::string to_hex(const uint8_t* data, size_t size);

/// The value of a lowercase hex digit, or -1 (upper case is refused: the protocol writes
/// lowercase).
constexpr int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

}  // namespace fusee::proto
