// `fusee server`: opens the log, starts the actors and serves until SIGINT or SIGTERM.
#pragma once

#include <string>

#include "app/config.hpp"

namespace fusee::app {

/// Returns the process exit code. `ready_file`, if set, is written with "listen=host:port" once
/// the server accepts connections (tests use it to find an ephemeral port).
int run_server(const server_config& cfg, const std::string& ready_file);

}  // namespace fusee::app
