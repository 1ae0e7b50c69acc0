// How a node shares its file descriptors: the reserve, the invoker's POSTs, the HTTP listeners and
// the worker and client connections (actors/net/descriptor_budget.hpp).
#include <doctest/doctest.h>

#include "actors/net/connection_limits.hpp"
#include "actors/net/descriptor_budget.hpp"

using namespace fusee::server;

namespace {

/// The defaults: 16,384 connections, two HTTP listeners of 1,024, and `posts` POSTs at once.
descriptor_demand defaults(uint32_t posts = 0, bool tls = false) {
  descriptor_demand d;
  d.connections = 16'384;
  d.per_connection = tls ? 4 : 2;
  d.http_listeners = 2;
  d.http_connections = 1'024;
  d.per_http_connection = tls ? 3 : 1;
  d.invoker_posts = posts;
  return d;
}

/// Descriptors a plan takes, the reserve included.
uint64_t taken(const descriptor_demand& d, const descriptor_plan& p) {
  return reserved_descriptors + uint64_t{p.connections} * d.per_connection +
         uint64_t{d.http_listeners} * p.http_connections * d.per_http_connection +
         uint64_t{p.invoker_connections} * descriptors_per_post;
}

}  // namespace

TEST_CASE("with descriptors enough for all, every owner gets what it asked for") {
  auto d = defaults(64);
  auto p = plan_descriptors(d, 524'288);
  CHECK_FALSE(p.cut);
  CHECK(p.connections == 16'384);
  CHECK(p.http_connections == 1'024);
  CHECK(p.invoker_connections == 64);
  CHECK(p.wanted == 256 + 16'384 * 2 + 2 * 1'024 + 64 * 3);
  CHECK(taken(d, p) == p.wanted);
}

TEST_CASE("short of descriptors, the connections give way and the HTTP listeners and POSTs keep "
          "theirs while they take at most half") {
  auto d = defaults(16);
  auto p = plan_descriptors(d, 20'000);
  CHECK(p.cut);
  CHECK(p.http_connections == 1'024);
  CHECK(p.invoker_connections == 16);
  CHECK(p.connections == (20'000 - 256 - 2'048 - 48) / 2);
  CHECK(taken(d, p) <= 20'000);
}

TEST_CASE("when the HTTP listeners and the POSTs would take more than half, the HTTP listeners "
          "give way first") {
  auto d = defaults(16);
  auto p = plan_descriptors(d, 1'024);  // a common soft and hard limit
  // (1,024 - 256) / 2 = 384 for the side: 48 for 16 POSTs, (384 - 48) / 2 = 168 per listener.
  CHECK(p.invoker_connections == 16);
  CHECK(p.http_connections == 168);
  CHECK(p.connections == (768 - 48 - 336) / 2);
  CHECK(taken(d, p) <= 1'024);

  // 3,000 descriptors of POSTs: the HTTP listeners keep 16 each (an admin server must still
  // answer its health checks), the POSTs take the rest of the half.
  auto many_posts = plan_descriptors(defaults(1'000), 1'024);
  CHECK(many_posts.http_connections == 16);
  CHECK(many_posts.invoker_connections == (384 - 32) / 3);
  CHECK(many_posts.connections == (768 - 351 - 32) / 2);
}

TEST_CASE("endpoints whose concurrency adds up past 2^32 are cut like any others, not wrapped") {
  auto d = defaults();
  d.invoker_posts = uint64_t{1} << 32;  // two endpoints of concurrency 2^31
  auto p = plan_descriptors(d, 524'288);
  CHECK(p.cut);
  CHECK(p.http_connections == 16);
  CHECK(p.invoker_connections == ((524'288 - 256) / 2 - 32) / 3);
  CHECK(p.connections == 16'384);
}

TEST_CASE("a cluster's links are kept beside the reserve, 16 descriptors per other node") {
  descriptor_demand d;
  d.connections = 16'384;
  d.cluster_peers = 2;
  auto p = plan_descriptors(d, 1'024);
  CHECK(p.connections == (1'024 - 256 - 32) / 2);
  CHECK(p.wanted == 256 + 32 + 16'384 * 2);
}

TEST_CASE("with TLS each connection counts its terminator's descriptors") {
  auto d = defaults(0, true);
  auto p = plan_descriptors(d, 65'536);
  CHECK(p.http_connections == 1'024);
  CHECK(p.invoker_connections == 0);
  CHECK(p.connections == (65'536 - 256 - 2 * 1'024 * 3) / 4);
  CHECK(taken(d, p) <= 65'536);
}

TEST_CASE("without the reserve's worth of descriptors every share is one, never none") {
  auto p = plan_descriptors(defaults(8), 100);
  CHECK(p.cut);
  CHECK(p.connections == 1);
  CHECK(p.http_connections == 1);
  CHECK(p.invoker_connections == 1);
}

TEST_CASE("a node without HTTP listeners or endpoints gives the connections all but the reserve") {
  descriptor_demand d;
  d.connections = 16'384;
  auto p = plan_descriptors(d, 1'024);
  CHECK(p.connections == (1'024 - 256) / 2);
  CHECK(p.invoker_connections == 0);
  CHECK(plan_descriptors(d, 300).connections == 22);
}

TEST_CASE("a connection refused at limits.max_connections names the setting, and its cut by the "
          "descriptor limit when there was one") {
  fusee::server::connection_limits as_set{1, 8};
  CHECK_FALSE(as_set.admit("127.0.0.1"));
  CHECK(as_set.admit("127.0.0.2") ==
        "this node already has 1 connections open (limits.max_connections): try again later");
  fusee::server::connection_limits cut{1, 8, 16384};
  CHECK_FALSE(cut.admit("127.0.0.1"));
  CHECK(cut.admit("127.0.0.2") ==
        "this node already has 1 connections open (limits.max_connections=16384, cut to 1 by the "
        "process's descriptor limit: raise it, see the start-up warning): try again later");
}
