// The HTTP API's routes (docs/operations.md "HTTP API"): what a request asks for, from its
// method, path, query and body. Pure (no CAF, no sockets): tested and fuzzed directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "app/http_server.hpp"

namespace fusee::app {

/// What a request asks for, from its method, path, query and body: the CALL to make, or the
/// HTTP error to answer at once. Pure (tested directly).
struct api_request {
  std::string method;  ///< start, signal, result, describe, cancel
  std::string workflow;
  std::string type;
  std::string args;  ///< JSON text
  uint64_t wait_ms = 0;
};
struct api_refusal {
  unsigned status = 400;
  std::string body;   ///< JSON
  std::string allow;  ///< a 405's Allow header: the methods the path takes
};
/// nullopt-free: exactly one of the two is set.
struct api_route {
  std::optional<api_request> call;
  std::optional<api_refusal> refusal;
};
api_route route_api_request(const http_exchange& ex);

/// The arguments of a `result` CALL waiting up to `wait_ms`.
std::string result_args(const std::string& id, uint64_t wait_ms);

}  // namespace fusee::app
