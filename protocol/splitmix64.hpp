// A small, fast generator for jitter and dice (8 bytes of state, so every wake record can own
// one). Not for secrets.
#pragma once

#include <cstdint>

namespace fusee::proto {

struct splitmix64 {
  uint64_t state;
  uint64_t operator()() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

}  // namespace fusee::proto
