// The invoker: one wake-record actor per shard (shard.cpp), one actor per [[endpoint]]
// (endpoint.cpp) and the scheduler between them (scheduler.cpp). The entry point.
#pragma once

#include <string>

#include "actors/invoker_interface.hpp"
#include "actors/node_settings.hpp"

namespace fusee::server {

class http_sender;

/// Spawns the scheduler, one endpoint actor per `settings.endpoints` entry and one wake record
/// per shard. Hand both to the directory (invoker_ready): it passes the records on to the
/// scheduler, which starts dispatching then. The directory sends shard events to `shards[i]`,
/// binds invoked workers through the scheduler (the endpoint that owns the invocation answers),
/// and receives fence_requests from the endpoints. `server_address` goes into invocation bodies;
/// `http` must outlive the actors. Exiting the scheduler ends every invoker actor.
invoker_handles spawn_invoker(caf::actor_system& sys, const node_settings& settings,
                              std::string server_address, http_sender* http, fence_actor directory);

}  // namespace fusee::server
