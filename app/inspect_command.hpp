// `fusee inspect`: asks a node's inspector over CAF's middleman (a remote typed actor at the
// node's inspect_listen address) and prints a table, or JSON, once or refreshing (--watch).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace fusee::app {

struct inspect_command {
  std::string node = "127.0.0.1:7403";  ///< the node's inspect_listen
  bool json = false;
  bool watch = false;
  uint32_t interval_ms = 1000;
  /// Every node of the node's cluster (through their inspectors), not only this one.
  bool cluster = false;
  /// The query, as key=value pairs (server::parse_query's keys: kind, shard, state, ...).
  std::map<std::string, std::string> query;
};

int run_inspect(const inspect_command& cmd);

}  // namespace fusee::app
