// "host:port" as operators and programs write it, parsed once for the server, tools and benches.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fusee::client {

struct host_port {
  std::string host;
  uint16_t port = 0;
};

/// "127.0.0.1:7400" -> {host, port}; port 0 picks a free port. nullopt for anything else (no
/// colon, empty host or port, a port that is not a number up to 65535).
std::optional<host_port> parse_host_port(const std::string& text);

/// "a:1,b:2" -> {"a:1", "b:2"}: a cluster's nodes in one argument, each part as written.
std::vector<std::string> split_address_list(const std::string& text);

}  // namespace fusee::client
