// One worker or client TCP connection: frame decoding, the HELLO handshake, liveness, and the
// hand-off of each request to the log (appends, reads, checkpoints: straight to the writer
// thread, no actor hop) or to the directory (leases, calls, messages).
#pragma once

#include <cstdint>
#include <string>

#include <caf/fwd.hpp>

namespace fusee::server {

class wal_writer;
class log_sink;

struct session_config {
  uint32_t shards = 16;
  uint32_t ping_interval_ms = 1000;
  uint32_t timeout_ms = 5000;
};

/// Spawns the broker that accepts connections on host:port (0 = any free port) and forks a
/// session for each. `*bound` receives the port.
caf::expected<caf::actor> spawn_acceptor(caf::actor_system& sys, const std::string& host,
                                         uint16_t port, session_config cfg, caf::actor directory,
                                         wal_writer* wal, log_sink* sink, uint16_t* bound);

}  // namespace fusee::server
