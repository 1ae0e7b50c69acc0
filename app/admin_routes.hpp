// The admin HTTP server's routes (server.admin_listen): the dashboard (/), /metrics, /healthz,
// /readyz and the JSON views /v1/actors, /v1/shards, /v1/shards/{n}, /v1/endpoints, /v1/sessions,
// /v1/log, /v1/invoker, /v1/overview and /v1/problems (docs/operations.md).
#pragma once

#include "actors/directory_interface.hpp"
#include "actors/inspect/inspector.hpp"
#include "actors/net/connection_limits.hpp"
#include "actors/net/io_loop.hpp"
#include "actors/token_store.hpp"
#include "tls/terminator.hpp"

#include "app/host_allow_list.hpp"
#include "app/http_server.hpp"
#include <atomic>
#include <functional>
#include <utility>
#include <vector>

namespace fusee::app {

struct admin_context {
  server::directory_actor directory;
  server::scheduler_actor scheduler;  ///< null when no endpoint is configured
  server::inspector_actor inspector;
  bool invoker_configured = false;
  server::cluster_actor cluster;  ///< null outside a cluster
  /// With tokens, every route but the dashboard's files, /healthz and /readyz needs a bearer
  /// token (read scope or above).
  std::shared_ptr<server::token_store> tokens;
  /// Without tokens, the Hosts a request may name (check_host).
  host_allow_list hosts{std::vector<std::string>{}};
  std::shared_ptr<server::connection_limits> limits;  ///< connections open, limit refusals
  /// The I/O threads' turns: their longest since the last gathering of /metrics (null: no loop).
  std::shared_ptr<server::io_loop::turn_clocks> io_turns;
  /// The node's TLS terminators by listener name (workers, http, cluster), fixed before the
  /// admin server starts. Empty without TLS.
  std::vector<std::pair<std::string, const tls::terminator*>> terminators;
  /// The fronts that bound listeners CAF serves, for their refusals: the cluster's TLS links
  /// (null outside a cluster or without TLS) and the inspector's connections (null: no
  /// inspect_listen).
  const tls::terminator* cluster_links = nullptr;
  const tls::terminator* inspect_links = nullptr;
  /// The admin server itself, set once it is up: its terminator ("admin") and its refusals.
  std::shared_ptr<std::atomic<const http_server*>> own_server =
      std::make_shared<std::atomic<const http_server*>>(nullptr);
  /// The HTTP API's server (connections open and refused, bodies refused for
  /// limits.http_body_kb); null: no API.
  const http_server* api_server = nullptr;
  /// The log's failure ("" while it works): /healthz and /readyz fail once it has one. Null: the
  /// log is never asked.
  std::function<std::string()> log_failure;
};

/// The handler for the admin server. It runs on microhttpd's threads and asks the actors with a
/// blocking scoped actor (never on a CAF scheduler thread); /metrics is gathered at most once a
/// second, whatever the number of scrapers.
http_server::handler admin_routes(caf::actor_system& sys, admin_context ctx);
/// What the admin server refuses before reading a request's body: without tokens, a Host it is
/// not configured under (403, check_host), except for the probes /healthz and /readyz, which
/// show nothing a page could use; anything but GET (405).
http_server::gate admin_gate(const admin_context& ctx);

}  // namespace fusee::app
