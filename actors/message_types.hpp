// Registers every message type of the server's actors with CAF, once, for every binary.
#pragma once

#include <caf/fwd.hpp>

namespace fusee::server {

/// Adds every struct of directory_interface.hpp and invoker_interface.hpp (and the containers of
/// them that messages carry) under a stable name, the same on every node.
void add_server_types(caf::actor_system_config& cfg);

}  // namespace fusee::server
