// /metrics in the Prometheus text format (version 0.0.4), built from two inspector answers: the
// node's actors other than shards (every one asked), and the shards (states and mailboxes).
// Names carry their unit; counters end in _total; labels are kinds, states, roles, outcomes and
// endpoint indexes only, never shard or session ids (docs/operations.md lists every metric).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "actors/inspect/stats.hpp"

namespace fusee::app {

/// The token counters of a node with [[token]]s (server::token_store).
struct auth_counts {
  uint64_t tokens = 0, refused = 0, reloads = 0;
};

/// What the node's guards count outside the actors: tokens, connections and limits.
struct guard_counts {
  std::optional<auth_counts> auth;
  std::optional<uint64_t> connections;  ///< worker and client connections open
  /// The I/O threads' longest turn since the last gathering (io_loop::turn_clocks).
  std::optional<double> io_turn_seconds;
  /// HTTP connections open by listener (admin, http), each at most limits.max_http_connections.
  std::vector<std::pair<std::string, uint64_t>> http_connections;
  /// Requests whose client closed its connection while they waited, by listener (the HTTP API).
  std::vector<std::pair<std::string, uint64_t>> http_clients_gone;
  /// Refusals by limit name (connections, connections_per_peer, hello_timeout, ...).
  std::vector<std::pair<std::string, uint64_t>> limit_refused;
  /// Per TLS listener (workers, http, admin, cluster): handshakes by outcome.
  struct tls_listener {
    std::string name;
    uint64_t done = 0, failed = 0, timed_out = 0, plaintext = 0;
  };
  std::vector<tls_listener> tls;
};

std::string render_metrics(const server::inspect_reply& actors, const server::inspect_reply& shards,
                           const guard_counts& guards = {});

}  // namespace fusee::app
