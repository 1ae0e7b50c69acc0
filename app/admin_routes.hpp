// The admin HTTP server's routes (server.admin_listen): /healthz and /v1/invoker.
#pragma once

#include "actors/directory_interface.hpp"
#include "app/http_server.hpp"

namespace fusee::app {

/// The handler for the admin server. `scheduler` is null when no endpoint is configured. It runs
/// on microhttpd's threads and asks the actors with a blocking scoped actor (never on a CAF
/// scheduler thread).
http_server::handler admin_routes(caf::actor_system& sys, server::directory_actor directory,
                                  server::scheduler_actor scheduler);

}  // namespace fusee::app
