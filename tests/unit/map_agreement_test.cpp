// What a clustered node withholds as it hears its peers: the start's hold until each was heard
// (a port that never answered at once, a dial that reached it and failed only after the peer
// timeout), and the contests of peers serving another map, told to the directory on change only.
#include <doctest/doctest.h>

#include "actors/cluster/map_agreement.hpp"

using namespace fusee;
using namespace fusee::server;
using namespace std::chrono_literals;

namespace {

proto::cluster_node node(std::string name, const std::string& shards, int port) {
  auto r = proto::parse_shard_ranges(shards);
  REQUIRE(r);
  auto at = "127.0.0.1:" + std::to_string(port);
  return proto::cluster_node{std::move(name), at, at, "", *r};
}

/// Node a of a, b, c (0-7, 8-15, 16-23), peer timeout 3 s.
node_settings node_a() {
  node_settings cfg;
  cfg.shards = 24;
  cfg.clustered = true;
  cfg.cluster_node = "a";
  cfg.cluster = {{node("a", "0-7", 7410), node("b", "8-15", 7411), node("c", "16-23", 7412)}};
  cfg.cluster_peer_timeout_ms = 3000;
  return cfg;
}

const map_agreement::time_point t0{std::chrono::seconds(100)};

}  // namespace

TEST_CASE("a clustered node withholds every shard it serves until it has heard each peer once") {
  map_agreement a(node_a());
  CHECK_FALSE(a.settled());
  // The directory starts told the hold: nothing new to tell.
  CHECK_FALSE(a.to_tell());
  auto held = a.withheld_now();
  REQUIRE(held.parts.size() == 1);
  CHECK(held.parts[0].ranges == std::vector<proto::shard_range>{{0, 7}});
  CHECK_FALSE(held.parts[0].conflict);
  CHECK(held.parts[0].why == "node a has not yet heard from every node of its cluster since it "
                             "started");
  CHECK_FALSE(a.heard(1));
  CHECK_FALSE(a.heard(1));  // b twice is still not c
  CHECK_FALSE(a.heard(0));  // itself does not count
  CHECK_FALSE(a.settled());
  CHECK_FALSE(a.to_tell());
  CHECK(a.heard(2));
  CHECK(a.settled());
  auto told = a.to_tell();
  REQUIRE(told);
  CHECK(told->parts.empty());
  CHECK_FALSE(a.to_tell());
  CHECK_FALSE(a.heard(2));  // the hold ends once
}

TEST_CASE("a node alone in its cluster, or outside one, withholds nothing from the start") {
  auto cfg = node_a();
  cfg.cluster = {{node("a", "0-23", 7410)}};
  map_agreement alone(cfg);
  CHECK(alone.settled());
  CHECK(alone.withheld_now().parts.empty());
  CHECK_FALSE(alone.to_tell());
  map_agreement outside;
  CHECK(outside.settled());
  CHECK_FALSE(outside.to_tell());
}

TEST_CASE("a peer whose port does not answer counts as heard at once, one whose port answered "
          "only once the peer timeout has passed since its first such failure") {
  map_agreement a(node_a());
  CHECK_FALSE(a.dial_failed(1, false, t0));  // b: nothing listens there (c not heard yet)
  // c's port answered but the handshake failed, again and again
  CHECK_FALSE(a.dial_failed(2, true, t0));
  CHECK_FALSE(a.dial_failed(2, true, t0 + 2999ms));
  CHECK_FALSE(a.settled());
  CHECK(a.dial_failed(2, true, t0 + 3000ms));
  CHECK(a.settled());
  CHECK(a.to_tell());
  // once ended, no failure ends it again
  CHECK_FALSE(a.dial_failed(1, false, t0 + 4000ms));
  CHECK_FALSE(a.dial_failed(2, true, t0 + 9000ms));
}

TEST_CASE("a peer whose port answered and then stops answering counts as heard at once, without "
          "waiting for the peer timeout") {
  map_agreement a(node_a());
  CHECK_FALSE(a.heard(1));
  CHECK_FALSE(a.dial_failed(2, true, t0));
  CHECK_FALSE(a.dial_failed(2, true, t0 + 1000ms));
  CHECK(a.dial_failed(2, false, t0 + 1500ms));  // it went away: nothing there to hear
}

TEST_CASE("a peer serving another map withholds exactly the shards that map gives to another "
          "node, as a conflict, before the start's hold, until that peer agrees") {
  map_agreement a(node_a());
  // c's map gives 3-4 to c, and 16-23 back to c as before
  proto::cluster_map theirs{
      {node("a", "0-2, 5-7", 7410), node("b", "8-15", 7411), node("c", "3-4, 16-23", 7412)}};
  auto out = a.contested_by("c", "", theirs.canonical());
  CHECK(out.what == map_agreement::change::withheld);
  CHECK(out.unreadable.empty());
  REQUIRE(a.contests().count("c") == 1);
  CHECK(a.contests().at("c").digest == theirs.digest());
  auto told = a.to_tell();
  REQUIRE(told);
  REQUIRE(told->parts.size() == 2);  // the contest, then the start's hold
  CHECK(told->parts[0].ranges == std::vector<proto::shard_range>{{3, 4}});
  CHECK(told->parts[0].conflict);
  CHECK(told->parts[0].why ==
        "node c serves a different cluster map (digest " + theirs.digest().substr(0, 12) +
            "), which gives shard(s) 3-4 to another node: node a leases them to no worker until "
            "both serve the same map");
  CHECK_FALSE(told->parts[1].conflict);
  // the same map again changes nothing, and nothing is told again
  CHECK(a.contested_by("c", theirs.digest(), theirs.canonical()).what ==
        map_agreement::change::none);
  CHECK_FALSE(a.to_tell());
  // the hold ends: the contest stays
  a.heard(1);
  a.heard(2);
  told = a.to_tell();
  REQUIRE(told);
  REQUIRE(told->parts.size() == 1);
  CHECK(told->parts[0].ranges == std::vector<proto::shard_range>{{3, 4}});
  // c serves a's map now: 3-4 given back, once
  auto back = a.agreed_with("c");
  REQUIRE(back);
  CHECK(*back == std::vector<proto::shard_range>{{3, 4}});
  CHECK_FALSE(a.agreed_with("c"));
  CHECK(a.contests().empty());
  told = a.to_tell();
  REQUIRE(told);
  CHECK(told->parts.empty());
}

TEST_CASE("a changed contest replaces the one before, one that contests nothing clears it, and a "
          "map that differs only in addresses contests nothing") {
  map_agreement a(node_a());
  a.heard(1);
  a.heard(2);
  (void)a.to_tell();
  proto::cluster_map theirs{
      {node("a", "0-6", 7410), node("b", "7-15", 7411), node("c", "16-23", 7412)}};
  CHECK(a.contested_by("b", "", theirs.canonical()).what == map_agreement::change::withheld);
  CHECK(a.to_tell()->parts.at(0).ranges == std::vector<proto::shard_range>{{7, 7}});
  theirs.nodes[0].shards = {{0, 5}};
  theirs.nodes[1].shards = {{6, 15}};
  CHECK(a.contested_by("b", "", theirs.canonical()).what == map_agreement::change::withheld);
  CHECK(a.to_tell()->parts.at(0).ranges == std::vector<proto::shard_range>{{6, 7}});
  // the same shards under another map (c's address moved there too): a new digest is told
  theirs.nodes[2].listen = "127.0.0.1:2";
  CHECK(a.contested_by("b", "", theirs.canonical()).what == map_agreement::change::withheld);
  CHECK(a.contests().at("b").digest == theirs.digest());
  auto told = a.to_tell();
  REQUIRE(told);
  CHECK(told->parts.at(0).ranges == std::vector<proto::shard_range>{{6, 7}});
  CHECK(told->parts.at(0).why.find(theirs.digest().substr(0, 12)) != std::string::npos);
  proto::cluster_map readdressed = node_a().cluster;
  readdressed.nodes[1].listen = "127.0.0.1:1";
  auto out = a.contested_by("b", "", readdressed.canonical());
  CHECK(out.what == map_agreement::change::cleared);
  CHECK(out.given_back == std::vector<proto::shard_range>{{6, 7}});
  CHECK(a.to_tell()->parts.empty());
  // and from a node with no contest, nothing to clear
  CHECK(a.contested_by("c", "", readdressed.canonical()).what == map_agreement::change::none);
  CHECK_FALSE(a.to_tell());
}

TEST_CASE("a map that cannot be read withholds every shard of this node and says why, and two "
          "nodes' contests are withheld side by side, by node name") {
  map_agreement a(node_a());
  auto out = a.contested_by("stray", "0123456789abcdef", "not a map");
  CHECK(out.what == map_agreement::change::withheld);
  CHECK_FALSE(out.unreadable.empty());
  CHECK(a.contests().at("stray").shards == std::vector<proto::shard_range>{{0, 7}});
  CHECK(a.contests().at("stray").digest == "0123456789abcdef");
  CHECK(a.contested_by("other", "", "still not a map").what == map_agreement::change::withheld);
  CHECK(a.contests().at("other").digest == "(unreadable)");
  auto w = a.withheld_now();
  REQUIRE(w.parts.size() == 3);
  CHECK(w.parts[0].why.rfind("node other ", 0) == 0);
  CHECK(w.parts[1].why.rfind("node stray ", 0) == 0);
  CHECK(a.agreed_with("other"));
  CHECK(a.contests().size() == 1);
}

TEST_CASE("a node a peer is linked to another process as withholds every shard it serves, at "
          "once and naming why, until no peer is") {
  map_agreement a(node_a());
  for (size_t i : {1, 2})
    a.heard(i);
  REQUIRE(a.settled());
  REQUIRE(a.to_tell());  // the start's hold is over: nothing withheld
  CHECK(a.withheld_now().parts.empty());

  CHECK(a.shadowed("b", true));
  CHECK_FALSE(a.shadowed("b", true));  // no change
  CHECK(a.shadowed("c", true));
  auto w = a.to_tell();
  REQUIRE(w);
  REQUIRE(w->parts.size() == 1);
  CHECK(w->parts[0].conflict);  // calls fail at once
  CHECK(proto::format_shard_ranges(w->parts[0].ranges) == "0-7");
  CHECK(w->parts[0].why.find("is linked to another process as node a") != std::string::npos);

  CHECK(a.shadowed("b", false));
  auto still = a.to_tell();  // c still is: the same shards, naming c now
  REQUIRE(still);
  REQUIRE(still->parts.size() == 1);
  CHECK(proto::format_shard_ranges(still->parts[0].ranges) == "0-7");
  CHECK(still->parts[0].why.find("node c is linked") == 0);
  CHECK(a.shadowed("c", false));
  auto back = a.to_tell();
  REQUIRE(back);
  CHECK(back->parts.empty());
  CHECK_FALSE(a.shadowed("c", false));
}
