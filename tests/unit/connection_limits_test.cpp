// The node's connection limits: what fits in the process's file descriptors.
#include <doctest/doctest.h>

#include "actors/net/connection_limits.hpp"

using fusee::server::connection_limits;

TEST_CASE("connections are capped so that the log keeps its descriptors, never below one") {
  CHECK(connection_limits::fitting(16'384, 524'288, 2) == 16'384);  // a hard limit: room for all
  CHECK(connection_limits::fitting(16'384, 1'024, 2) == 384);       // (1,024 - 256) / 2
  CHECK(connection_limits::fitting(16'384, 65'536, 4) == 16'320);   // TLS: (65,536 - 256) / 4
  CHECK(connection_limits::fitting(100, 1'024, 2) == 100);
  CHECK(connection_limits::fitting(16'384, 300, 2) == 22);
  CHECK(connection_limits::fitting(16'384, 100, 2) == 1);
}
