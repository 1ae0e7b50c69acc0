// One configured endpoint as an actor: it signs and sends its invocations' POSTs (through the curl
// thread), binds each invoked worker to its invocation and fences the invocation when it ends.
// Interface: endpoint_actor in invoker_interface.hpp.
#pragma once

#include <string>

#include "actors/invoker.hpp"
#include "actors/invoker_interface.hpp"

namespace fusee::server {

/// `index` is the endpoint's position in the configuration; `directory` gets (fence_atom,
/// session) when an invocation's leases must end; `http` must outlive the actor.
endpoint_actor spawn_endpoint(caf::actor_system& sys, uint32_t index, endpoint_settings cfg,
                              std::string server_address, uint32_t close_grace_ms,
                              http_sender* http, scheduler_actor scheduler, caf::actor directory);

}  // namespace fusee::server
