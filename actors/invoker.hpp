// The invoker: one wake-record actor per shard (shard.cpp), one actor per [[endpoint]]
// (endpoint.cpp) and the scheduler between them (scheduler.cpp). Settings and the entry point.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/invoker_interface.hpp"

namespace fusee::server {

class http_sender;

struct endpoint_settings {
  std::string url;
  std::vector<std::string> types;
  std::string secret;
  uint32_t concurrency = 16;
  uint32_t budget_ms = 60000;
  uint32_t max_shards = 0;
  uint32_t grace_ms = 30000;
  std::string ca_file, cert_file, key_file;
};

struct invoker_settings {
  uint32_t shards = 16;
  uint32_t close_grace_ms = 2000;
  std::string server_address;  ///< put in invocation bodies
  std::vector<endpoint_settings> endpoints;
};

/// Spawns the scheduler, its endpoints and one wake record per shard. Give both handles to the
/// directory with (put_atom, scheduler, shards): it passes the records on to the scheduler, which
/// starts dispatching then. The directory sends shard events to `shards[i]` (due_atom,
/// leased_atom, report_atom), INVOKED binds and granted counts to the scheduler, and receives
/// (fence_atom, session) from the endpoints.
/// `http` must outlive the actors. Exiting the scheduler ends every invoker actor.
invoker_handles spawn_invoker(caf::actor_system& sys, invoker_settings cfg, http_sender* http,
                              caf::actor directory);

/// The curl thread's completion callback target for the invoker's endpoints (thread-safe).
void deliver_http_result(const scheduler_actor& scheduler, http_outcome outcome);

}  // namespace fusee::server
