// host:port parsing, shared by the server's settings, the tools and the benches.
#include <doctest/doctest.h>

#include "client/address.hpp"

using fusee::client::parse_host_port;

TEST_CASE("host:port parses a host and a port up to 65535, port 0 included") {
  auto a = parse_host_port("127.0.0.1:7400");
  REQUIRE(a);
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 7400);
  auto any = parse_host_port("localhost:0");
  REQUIRE(any);
  CHECK(any->host == "localhost");
  CHECK(any->port == 0);
  CHECK(parse_host_port("h:65535")->port == 65535);
}

TEST_CASE("anything else is refused, never thrown or truncated") {
  for (const char* bad : {"", "7400", ":7400", "host:", "host:65536", "host:123456", "host:-1",
                          "host:12a", "host: 80", "host:99999999999999999999"})
    CHECK_MESSAGE(!parse_host_port(bad), bad);
}
