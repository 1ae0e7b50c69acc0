// The invoker: a scheduler actor that knows which shards are due and picks endpoints, and one
// endpoint actor per [[endpoint]] that signs and sends the POSTs (through the curl thread),
// binds invoked workers to their invocation, and fences an invocation's leases when it ends.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/fwd.hpp>

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

/// Spawns the scheduler and its endpoints. The scheduler answers:
///   (due_atom, shard, reasons, start_type)        a shard has work (directory)
///   (leased_atom, shard)                            a shard got a holder: not due
///   (report_atom, shard, flags, due_in_ms, steps, open_us, types, crashed, invoked)
///                                                   a lease ended, with what its IDLE said
///   (bind_atom, invocation, session) -> (code, shards, remaining_ms)   an INVOKED HELLO
///   (leased_atom, invocation, granted)              the bound worker got `granted` shards
///   (metrics_atom) -> std::string                   GET /v1/invoker
/// `http` must outlive the actors; `directory` receives (fence_atom, session).
caf::actor spawn_invoker(caf::actor_system& sys, invoker_settings cfg, http_sender* http,
                         caf::actor directory);

/// The curl thread's completion callback target for the invoker's endpoints.
void deliver_http_result(const caf::actor& scheduler, uint64_t id, long status, std::string error,
                         bool timed_out, double total_ms);

}  // namespace fusee::server
