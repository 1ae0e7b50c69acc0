// `fusee handler`: an invocation endpoint. It serves the invocation POST, checks the signature and
// connects back as the invoked worker: in `workflows` mode it runs the demo workflows with the
// runtime (worker/runtime.hpp); in `echo` mode (tests, benchmarks) it answers every relayed call
// with a fixed JSON result. Either way it reports IDLE and answers the POST.
#pragma once

#include <cstdint>
#include <string>

#include "client/security.hpp"
#include <vector>

namespace fusee::app {

struct handler_config {
  std::string mode = "workflows";  ///< or "echo"
  std::string listen = "127.0.0.1:9000";
  /// The endpoint's HMAC secrets: the current one and, while rotating, the previous one; a
  /// signature by any of them is accepted.
  std::vector<std::string> secret_files;
  std::string ready_file;
  uint32_t linger_ms = 100;               ///< leave after this long without a relayed call
  uint32_t max_appends_in_flight = 8192;  ///< worker_options::max_appends_in_flight
  uint32_t max_connections = 1024;        ///< connections open at once (a thread each)
  uint32_t fail_status = 0;               ///< answer every POST with this status instead (tests)
  uint32_t due_in_ms = 0;                 ///< report a timer this far ahead (0: nothing due)
  uint32_t report_flags = 0;              ///< IDLE flags to report (1 BUSY, 2 EXPIRED; tests)
  uint64_t tolerance_ms = 300000;         ///< signature clock tolerance
  client::security security;              ///< TLS and token towards the server; default: neither
};

int run_handler(const handler_config& cfg);

}  // namespace fusee::app
