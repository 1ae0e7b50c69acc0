// The liveness rule (PROTOCOL.md §3): how long a worker connection has been silent, clock-free.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fusee::server {

/// The silence (ns) that counts against a worker at `now`: since its last frame (`last_rx`) or
/// its LEASE (`lease_sent`), whichever came later. 0 before its LEASE: liveness applies from the
/// LEASE on, so a server slow to answer a HELLO (a million shards granted) does not count its own
/// delay as the worker's silence.
inline int64_t liveness_silence_ns(int64_t now, int64_t last_rx, int64_t lease_sent) {
  if (lease_sent == 0) return 0;
  return now - std::max(last_rx, lease_sent);
}

}  // namespace fusee::server
