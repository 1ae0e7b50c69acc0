// The HTTP API for clients (server.http_listen): workflows started, signalled, read and
// cancelled with curl. Each request becomes one CALL on the workflow's shard through the call
// gateway actor; the connection waits suspended (no thread per waiting request) and gets its
// answer when the CALL_RESULT, or the request's deadline, arrives. Routes and statuses:
// docs/operations.md "HTTP API".
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <caf/fwd.hpp>

#include "actors/call_gateway.hpp"
#include "actors/directory_interface.hpp"
#include "actors/node_settings.hpp"
#include "actors/token_store.hpp"
#include "app/api_routes.hpp"
#include "app/http_server.hpp"

namespace fusee::app {

class http_api {
public:
  /// Serves on host:port with at most `max_connections` open (the node's descriptor plan);
  /// nullptr and `*err` on failure. Destroy it before the actor system.
  static std::unique_ptr<http_api>
  start(caf::actor_system& sys, server::directory_actor directory,
        const server::node_settings& settings, std::shared_ptr<server::token_store> tokens,
        const std::string& host, uint16_t port, std::string* err, tls::ctx_ptr tls = nullptr,
        uint32_t max_connections = http_server::default_max_connections);
  ~http_api();
  uint16_t port() const;
  /// Its TLS terminator (counters for /metrics); null without TLS.
  const tls::terminator* tls() const;
  /// Its HTTP server (connections open and refused, for /metrics).
  const http_server& server() const;
  /// The call gateway actor (for the inspector).
  server::call_gateway_actor gateway() const;

  struct impl;

private:
  http_api() = default;
  std::unique_ptr<impl> impl_;
};

/// The HTTP status and body for a CALL_RESULT of `method` (status, body as the protocol gives
/// them).
http_reply api_reply(const std::string& method, uint8_t call_status, const std::string& body);

}  // namespace fusee::app
