// A server node's settings, each with its default, declared once (DESIGN.md §8 names). The
// actors read them from here; app/config.cpp's table points into these structs for TOML, flags,
// ranges and descriptions. No CAF here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/cluster_map.hpp"

namespace fusee::server {

/// One `[[endpoint]]` table: an HTTP endpoint the invoker may wake.
struct endpoint_settings {
  std::string url;
  std::vector<std::string> types;  ///< workflow types it has code for; empty = all
  std::string secret_file;
  std::string secret;  ///< the file's bytes less trailing CR/LF (read by validation); never logged
  uint32_t concurrency = 16;
  uint32_t budget_ms = 60000;
  uint32_t max_shards = 0;  ///< 0 = rules::invocation_shards' most
  uint32_t grace_ms = 30000;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

/// One `[[token]]` table: a secret a worker, client or reader proves it knows (docs/protocol.md,
/// "Extension: tokens"). Its file is read at start and on SIGHUP (server::token_store).
struct token_settings {
  std::string name;   ///< in logs and metrics, never the secret
  std::string scope;  ///< worker, client or read
  std::string file;
};

struct node_settings {
  // [server]
  std::string data_dir = "./data";
  uint32_t shards = 16;
  std::string listen = "127.0.0.1:7400";
  std::string admin_listen = "127.0.0.1:7401";
  std::string http_listen = "127.0.0.1:7402";     ///< the HTTP API; empty = off
  std::string inspect_listen = "127.0.0.1:7403";  ///< the inspector over CAF; empty = off
  std::string advertise;  ///< put in invocation bodies; empty = the address listened on
  uint64_t segment_mb = 16;
  /// Threads that read the worker and client connections; the one that read an APPEND commits it
  /// when the log is idle (no hand-off). With one, nothing is read while it commits, and what
  /// came meanwhile is read in one sweep into the next batch; more read in parallel meanwhile.
  uint32_t io_threads = 1;
  /// Host names an HTTP request's Host may give on a node without tokens and TLS, beyond IP
  /// literals, localhost, *.localhost, the hosts of the listen addresses and `advertise`, and this
  /// node's `http` in the cluster map ("*" = any; app/host_allow_list.hpp).
  std::vector<std::string> allowed_hosts;
  // [liveness]
  uint32_t ping_interval_ms = 1000;
  uint32_t timeout_ms = 5000;
  // [invoker]
  uint32_t park_ms = 30000;
  uint32_t close_grace_ms = 2000;
  /// A wake record nothing was sent to for this long (at least; at most half again) rests as 32
  /// bytes instead of an actor until its next message; 0 = never.
  uint32_t retire_idle_ms = 60000;
  // [log]
  std::string log_level = "info";  ///< trace, debug, info, warn, error, off
  // [limits]
  uint64_t write_buffer_mb = 16;
  uint32_t max_parked_per_shard = 10000;     ///< calls and messages waiting for one shard's holder
  uint32_t max_parked = 1000000;             ///< ... for all shards' holders
  uint32_t max_connections = 16384;          ///< worker and client connections open at once
  uint32_t max_connections_per_peer = 4096;  ///< ... from one peer address
  uint32_t max_http_connections = 1024;      ///< on each HTTP listener (admin, API)
  uint32_t hello_timeout_ms = 10000;  ///< from connecting to HELLO / CLIENT_HELLO (AUTH included)
  uint32_t frame_timeout_ms = 60000;  ///< from a frame's first byte to its last
  uint32_t max_frame_mb = 96;         ///< a frame's body, at most PROTOCOL.md's 96 MiB
  uint32_t max_appends_in_flight = 16384;  ///< per connection: APPENDs in the log's queue
  uint32_t http_body_kb = 4096;            ///< an HTTP API request's body
  // [[endpoint]]
  std::vector<endpoint_settings> endpoints;
  // [tls]: TLS 1.3 on the worker listener, the HTTP API and the admin server (empty: plaintext)
  std::string tls_cert_file;  ///< this node's certificate chain (PEM)
  std::string tls_key_file;   ///< its key (PEM)
  std::string tls_ca_file;    ///< when set, clients must present a certificate it signed (mutual)
  // [[token]]: none = connections need no token (bind to loopback, or add tokens)
  std::vector<token_settings> tokens;
  // [cluster]: absent = a cluster of one (DESIGN.md §7)
  bool clustered = false;
  std::string cluster_node;    ///< this node's name in the map
  std::string cluster_listen;  ///< host:port of this node's middleman, bound to that host only
  proto::cluster_map cluster;  ///< checked against `shards` by app::validate
  /// A peer silent this long is down (middleman heartbeats every third of it); dialling a peer
  /// gives up after it. Calls for a down node's shards fail at once.
  uint32_t cluster_peer_timeout_ms = 3000;

  /// How long a CALL that asked for `asked` ms (0: the default) may stay parked.
  uint32_t park_for(uint32_t asked) const {
    return asked == 0 ? park_ms : std::min(asked, park_ms);
  }
};

}  // namespace fusee::server
