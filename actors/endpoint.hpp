// One configured endpoint as an actor: it signs and sends its invocations' POSTs (through the curl
// thread), binds each invoked worker to its invocation and fences the invocation when it ends.
// Interface: endpoint_actor in invoker_interface.hpp.
#pragma once

#include <string>

#include "actors/invoker_interface.hpp"
#include "actors/node_settings.hpp"

namespace fusee::server {

class http_sender;

/// `index` is the endpoint's position in the configuration; `directory` gets a fence_request
/// when an invocation's leases must end; `http` must outlive the actor.
endpoint_actor spawn_endpoint(caf::actor_system& sys, uint32_t index, endpoint_settings cfg,
                              std::string server_address, uint32_t close_grace_ms,
                              http_sender* http, scheduler_actor scheduler, fence_actor directory);

}  // namespace fusee::server
