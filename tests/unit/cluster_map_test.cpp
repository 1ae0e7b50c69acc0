// The cluster's shard map: ranges read and written back, every shard owned exactly once (gaps
// and overlaps named), the owner of a shard, and a digest that ignores the order of writing.
#include <doctest/doctest.h>

#include "actors/cluster/shard_owners.hpp"
#include "protocol/cluster_map.hpp"

using namespace fusee::proto;

namespace {

cluster_node node(std::string name, const std::string& shards) {
  auto r = parse_shard_ranges(shards);
  REQUIRE_MESSAGE(r, (r ? "" : r.err().message));
  return cluster_node{std::move(name), "127.0.0.1:7410", "127.0.0.1:7400", "", *r};
}

}  // namespace

TEST_CASE("shard ranges are read in any order and spacing and written back") {
  auto r = parse_shard_ranges(" 20-31,0-7 , 12");
  REQUIRE(r);
  CHECK(*r == std::vector<shard_range>{{20, 31}, {0, 7}, {12, 12}});
  CHECK(format_shard_ranges(*r) == "20-31, 0-7, 12");
  CHECK(parse_shard_ranges("7-3").err().message == "the range \"7-3\" runs backwards");
  CHECK(parse_shard_ranges("0-x").err().message ==
        "\"0-x\" is not a shard or a range of shards (A-B)");
  CHECK(parse_shard_ranges("1,,2").err().message ==
        "\"\" is not a shard or a range of shards (A-B)");
  CHECK(parse_shard_ranges("  ").err().message == "no shards given");
  CHECK_FALSE(parse_shard_ranges("4294967296"));  // beyond 32 bits
}

TEST_CASE("a cluster map must own every shard exactly once, naming the gap or the overlap") {
  cluster_map ok{{node("a", "0-7"), node("b", "8-15, 24-31"), node("c", "16-23")}};
  CHECK_FALSE(check_cluster_map(ok, 32));
  CHECK(ok.owner_of(0) == 0u);
  CHECK(ok.owner_of(9) == 1u);
  CHECK(ok.owner_of(20) == 2u);
  CHECK(ok.owner_of(31) == 1u);
  CHECK_FALSE(ok.owner_of(32));

  CHECK(check_cluster_map({{node("a", "0-7"), node("b", "10-15")}}, 16) ==
        "shards 8-9 belong to no node");
  CHECK(check_cluster_map({{node("a", "0-7"), node("b", "8-14")}}, 16) ==
        "shard 15 belongs to no node");
  CHECK(check_cluster_map({{node("a", "1-15")}}, 16) == "shard 0 belongs to no node");
  CHECK(check_cluster_map({{node("a", "0-9"), node("b", "6-15")}}, 16) ==
        "shards 6-9 belong to both \"a\" (0-9) and \"b\" (6-15)");
  CHECK(check_cluster_map({{node("a", "0-15"), node("b", "3")}}, 16) ==
        "shard 3 belongs to both \"a\" (0-15) and \"b\" (3)");
  CHECK(check_cluster_map({{node("a", "0-7"), node("b", "8-15, 8")}}, 16) ==
        "node \"b\" lists shard 8 twice (8-15 and 8)");
  CHECK(check_cluster_map({{node("a", "0-16")}}, 16) ==
        "node \"a\" owns shards 0-16, but there are only 16 (0-15)");
  CHECK(check_cluster_map({{node("a", "0-7"), node("a", "8-15")}}, 16) ==
        "the cluster map names node \"a\" twice");
  CHECK(check_cluster_map({{node("", "0-15")}}, 16) == "node #1 of the cluster map has no name");
  CHECK(check_cluster_map({}, 16) == "the cluster map has no node ([[cluster.nodes]])");
  CHECK(check_cluster_map({{node("a b", "0-15")}}, 16) ==
        "node \"a b\": \"a b\" may hold only letters, digits and . _ - : [ ]");
  CHECK(check_cluster_map(ok, 0) == "a cluster map needs at least one shard");
}

TEST_CASE("two maps written in another order have one digest and any difference changes it") {
  cluster_map a{{node("a", "0-7"), node("b", "8-15, 24-31"), node("c", "16-23")}};
  cluster_map b{{node("c", "16-23"), node("b", "24-31,8-15"), node("a", "0-7")}};
  CHECK(a.digest() == b.digest());
  cluster_map split{{node("a", "0-3, 4-7"), node("b", "8-15, 24-31"), node("c", "16-23")}};
  CHECK(split.digest() == a.digest());  // adjacent ranges are one
  CHECK(a.digest().size() == 64);
  auto moved = b;
  moved.nodes[0].shards = {{16, 22}};
  moved.nodes[2].shards = {{0, 7}, {23, 23}};
  CHECK(moved.digest() != a.digest());
  auto readdressed = b;
  readdressed.nodes[1].listen = "127.0.0.1:7500";
  CHECK(readdressed.digest() != a.digest());
  CHECK(a.canonical() == "a cluster=127.0.0.1:7410 listen=127.0.0.1:7400 http= shards=0-7\n"
                         "b cluster=127.0.0.1:7410 listen=127.0.0.1:7400 http= shards=8-15, 24-31\n"
                         "c cluster=127.0.0.1:7410 listen=127.0.0.1:7400 http= shards=16-23\n");
}

TEST_CASE("a node's view of the owners: its own shards, the owner of the others, and a refusal "
          "naming that owner") {
  fusee::server::node_settings cfg;
  cfg.shards = 32;
  fusee::server::shard_owners alone(cfg);  // outside a cluster every shard is this node's
  CHECK_FALSE(alone.clustered());
  CHECK(alone.mine(0));
  CHECK(alone.mine(31));
  CHECK_FALSE(alone.refuse_foreign(7));

  cfg.clustered = true;
  cfg.cluster_node = "b";
  cfg.cluster = {{node("a", "0-7"), node("b", "8-15, 24-31"), node("c", "16-23")}};
  fusee::server::shard_owners b(cfg);
  CHECK(b.clustered());
  CHECK(b.self() == 1);
  CHECK_FALSE(b.mine(7));
  CHECK(b.mine(8));
  CHECK(b.mine(15));
  CHECK_FALSE(b.mine(16));
  CHECK(b.mine(24));
  CHECK(b.owner_index(23) == 2u);
  CHECK(b.owner_index(0) == 0u);
  CHECK_FALSE(b.owner_index(32));  // past the count: nobody's, the caller refuses it
  CHECK_FALSE(b.refuse_foreign(9));
  CHECK_FALSE(b.refuse_foreign(32));
  auto refused = b.refuse_foreign(20);
  REQUIRE(refused);
  CHECK(refused->code == err_code::not_holder);
  CHECK(refused->message ==
        "shard 20 is served by node c (workers 127.0.0.1:7400), not by node b: connect there");
}

TEST_CASE("a map's canonical text reads back as the same map, and a line it cannot read is named") {
  cluster_map a{{node("a", "0-7"), node("b", "8-15, 24-31"), node("c", "16-23")}};
  a.nodes[1].http = "127.0.0.1:7402";
  auto back = parse_canonical(a.canonical());
  REQUIRE(back);
  CHECK(back->canonical() == a.canonical());
  CHECK(back->nodes[1].shards == std::vector<shard_range>{{8, 15}, {24, 31}});
  CHECK(back->nodes[1].http == "127.0.0.1:7402");
  CHECK(back->nodes[0].http.empty());
  CHECK(parse_canonical("")->nodes.empty());
  CHECK(parse_canonical("a cluster=x listen=y http= shards=0-7\nb listen=y\n").err().message ==
        "line 2 of the map (\"b listen=y\"): no cluster=");
  CHECK(parse_canonical("a cluster=x listen=y http= shards=7-0").err().message ==
        "line 1 of the map (\"a cluster=x listen=y http= shards=7-0\"): the range \"7-0\" runs "
        "backwards");
  CHECK_FALSE(parse_canonical("a cluster=x listen=y"));
  CHECK_FALSE(parse_canonical("a"));
}

TEST_CASE("the shards two maps give one node and another (or none) are contested: exactly those") {
  cluster_map ours{{node("a", "0-7, 16-19"), node("b", "8-15"), node("c", "20-23")}};
  // the same shards, other addresses: nothing contested
  auto readdressed = ours;
  readdressed.nodes[2].listen = "127.0.0.1:1";
  CHECK(contested_shards(ours, "a", readdressed).empty());
  // theirs gives 3-4 and 17 to c, and knows no shard past 19
  cluster_map theirs{{node("a", "0-2, 5-7, 16, 18-19"), node("b", "8-15"), node("c", "3-4, 17")}};
  CHECK(contested_shards(ours, "a", theirs) == std::vector<shard_range>{{3, 4}, {17, 17}});
  // b's shards are b's in both: nothing for b; c's 20-23 are nobody's there
  CHECK(contested_shards(ours, "b", theirs).empty());
  CHECK(contested_shards(ours, "c", theirs) == std::vector<shard_range>{{20, 23}});
  // a map that does not name this node contests everything it serves; one that names nothing
  // here contests nothing
  cluster_map without_a{{node("b", "0-15"), node("c", "16-23")}};
  CHECK(contested_shards(ours, "a", without_a) == std::vector<shard_range>{{0, 7}, {16, 19}});
  CHECK(contested_shards(ours, "d", theirs).empty());
  // ranges that meet at the edges, and the last shard of 32 bits
  cluster_map edge_ours{{node("a", "0-4294967295")}};
  cluster_map edge_theirs{{node("a", "0, 10-20, 4294967295"), node("b", "1-9, 21-4294967294")}};
  CHECK(contested_shards(edge_ours, "a", edge_theirs) ==
        std::vector<shard_range>{{1, 9}, {21, 4294967294u}});
}
