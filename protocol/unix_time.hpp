// Wall-clock milliseconds since the Unix epoch: the time signatures, timers and IDLE reports
// speak in.
#pragma once

#include <chrono>
#include <cstdint>

namespace fusee::proto {

inline uint64_t unix_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace fusee::proto
