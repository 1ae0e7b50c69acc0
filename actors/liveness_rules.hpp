// The liveness rule (PROTOCOL.md §3): how long a worker connection has been silent, clock-free.
#pragma once

#include <algorithm>
#include <cstdint>

namespace fusee::server {

/// The silence (ns) that counts against a worker: from its last frame (`last_rx`) or its LEASE
/// (`lease_sent`), whichever came later, to `seen_through`, the time up to which the server has
/// read what the worker sent (connection::seen_through_ns(), never later than now). 0 before its
/// LEASE: liveness applies from the LEASE on, so a server slow to answer a HELLO (a million shards
/// granted) does not count its own delay as the worker's silence; nor does a server that is not
/// reading (its only I/O thread committing the log) count the time it does not look. Never
/// negative.
inline int64_t liveness_silence_ns(int64_t seen_through, int64_t last_rx, int64_t lease_sent) {
  if (lease_sent == 0) return 0;
  return std::max<int64_t>(0, seen_through - std::max(last_rx, lease_sent));
}

}  // namespace fusee::server
