// The node's connection limits: what fits in the process's file descriptors.
#include <doctest/doctest.h>

#include "actors/net/connection_limits.hpp"

using fusee::server::connection_limits;

TEST_CASE("connections are capped so that the log keeps its descriptors, never below one") {
  CHECK(connection_limits::fitting(16'384, 524'288) == 16'384);  // the hard limit: room for all
  CHECK(connection_limits::fitting(16'384, 1'024) == 384);       // (1,024 - 256) / 2
  CHECK(connection_limits::fitting(100, 1'024) == 100);
  CHECK(connection_limits::fitting(16'384, 300) == 22);
  CHECK(connection_limits::fitting(16'384, 100) == 1);
}
