// `fusee call`: one CALL from the command line (a client connection; PROTOCOL.md §7).
#pragma once

#include <cstdint>
#include <string>

#include "client/security.hpp"

namespace fusee::app {

/// Prints the CALL_RESULT body to stdout; exit code 0 for status ok, 1 for the holder's error,
/// 2 for a refused call (parked too long, holder lost, bad request) or a connection problem.
int run_call(const std::string& server, int64_t shard, const std::string& workflow,
             const std::string& method, const std::string& args, const std::string& type,
             uint32_t park_ms, const client::security& sec);

}  // namespace fusee::app
