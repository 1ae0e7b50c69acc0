// How a node shares its file descriptors (RLIMIT_NOFILE): a reserve for the log's files, the
// listening sockets and the cluster; the invoker's POSTs and the HTTP listeners; worker and client
// connections. Computed once at start; each owner is then held to its share (the listener's
// connection_limits, libmicrohttpd's connection limit, curl's), so that no peer can take the
// descriptors the log needs for its next segment. Pure, no clock.
#pragma once

#include <cstdint>

namespace fusee::server {

/// What the settings ask for.
struct descriptor_demand {
  uint32_t connections = 0;          ///< limits.max_connections
  uint32_t per_connection = 2;       ///< the socket and its lane's duplicate; 4 with TLS
  uint32_t http_listeners = 0;       ///< admin_listen, http_listen
  uint32_t http_connections = 0;     ///< limits.max_http_connections, on each HTTP listener
  uint32_t per_http_connection = 1;  ///< the socket; 3 with TLS (the terminator's socketpair)
  uint64_t invoker_posts = 0;        ///< the endpoints' concurrency, summed (0: no invoker)
  uint32_t cluster_peers = 0;        ///< the other nodes of the cluster's map
};

/// What each owner gets.
struct descriptor_plan {
  uint32_t connections = 1;          ///< worker and client connections open at once
  uint32_t http_connections = 1;     ///< on each HTTP listener
  uint32_t invoker_connections = 0;  ///< curl's connections open at once (0: no invoker)
  uint64_t wanted = 0;               ///< descriptors the whole demand takes, the reserve included
  bool cut = false;                  ///< something got less than it asked for
};

/// `fusee inspect` connections open at once on inspect_listen; more are closed as they come.
constexpr uint32_t inspect_connections = 32;
/// Kept free beyond every share: the log's segments and checkpoints, the listening sockets, the
/// inspector's connections (3 each: the front's two sockets and CAF's end), a moment's file reads.
constexpr uint64_t reserved_descriptors = 256;
/// Kept besides, per other node of a cluster: its links both ways (with TLS: the terminator's
/// socket, the loopback dial and CAF's end; the tunnel's sockets).
constexpr uint64_t descriptors_per_peer = 16;
/// Each HTTP listener keeps at least this many connections (or what it asks, if fewer) before the
/// POSTs take the rest of their half: an admin server left one connection could not answer its
/// health checks while a browser keeps one open.
constexpr uint32_t http_connections_kept = 16;
/// A POST: curl's socket, and its resolver's socketpair while a host name resolves.
constexpr uint32_t descriptors_per_post = 3;

/// Everything asked for when it fits in `descriptors` beside the reserve (256, and 16 per peer
/// node). When it does not, the invoker's POSTs and the HTTP listeners take at most half of what
/// the reserve leaves (the HTTP listeners give way first, down to http_connections_kept each,
/// then the POSTs), the worker and client connections the rest; each share at least one.
descriptor_plan plan_descriptors(const descriptor_demand& d, uint64_t descriptors);

}  // namespace fusee::server
