// `fusee worker` (a long-lived worker running the demo workflows) and the client commands
// `fusee start | signal | result | describe | cancel`: JSON in, JSON out.
#pragma once

#include <cstdint>
#include <string>

#include "client/security.hpp"

namespace fusee::app {

struct worker_command {
  std::string server = "127.0.0.1:7400";
  std::string name = "fusee-worker";
  uint32_t max_shards = 0;
  uint32_t max_appends_in_flight = 8192;
  uint64_t checkpoint_every = 1000;
  uint64_t checkpoint_after_ms = 60000;
  uint64_t retention_ms = 7ull * 24 * 3600 * 1000;
  uint64_t resend_every_ms = 30000;
  client::security security;  ///< TLS and token towards the server; default: neither
};

int run_worker(const worker_command& cfg);

struct client_command {
  std::string server = "127.0.0.1:7400";
  std::string method;  ///< start, signal, result, describe, cancel
  std::string id, type, name;
  std::string json_arg = "null";  ///< input (start) or payload (signal)
  std::string key;                ///< a signal's idempotency key (empty: none)
  uint64_t wait_ms = 0;
  uint32_t park_ms = 0;
  client::security security;  ///< TLS and token towards the server; default: neither
};

/// Prints the answer's JSON on stdout. Exit status: 0 ok, 1 the workflow or worker refused
/// (error JSON on stdout), 2 the call could not be made or was not answered (message on stderr).
int run_client_command(const client_command& cmd);

}  // namespace fusee::app
