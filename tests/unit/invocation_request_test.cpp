#include <doctest/doctest.h>

#include "protocol/invocation_request.hpp"

using namespace fusee::proto;

namespace {

invocation_request sample() {
  return invocation_request{1,     invocation_id{0x00f3a1c2b4d5e6f7}, {shard_id{3}, shard_id{9}},
                            60000, reason_call | reason_timer,        "127.0.0.1:7400"};
}

std::string parse_error(std::string_view json) {
  auto r = parse_invocation_request(json);
  REQUIRE_FALSE(r.has_value());
  return r.err().message;
}

}  // namespace

TEST_CASE("the invocation body is written exactly as PROTOCOL.md shows it") {
  CHECK(to_json(sample()) ==
        R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3,9],"budget_ms":60000,)"
        R"("reasons":["call","timer"],"server":"127.0.0.1:7400"})");
}

TEST_CASE("the invocation body round trips, with every reason") {
  auto r = sample();
  r.reasons = all_reasons;
  r.server = "host \"with\" quotes\\";
  auto back = parse_invocation_request(to_json(r));
  REQUIRE(back.has_value());
  CHECK(*back == r);
  CHECK(to_json(r).find(R"(["call","message","timer","recovery","handback","code"])") !=
        std::string::npos);
}

TEST_CASE("parsing accepts other key orders, whitespace and unknown keys") {
  auto r = parse_invocation_request(
      R"( { "server" : "s:1", "extra": {"nested": [1, 2]}, "reasons": [], "budget_ms": 5,
          "shards": [0], "invocation": "0000000000000001", "version": 1 } )");
  REQUIRE(r.has_value());
  CHECK(r->server == "s:1");
  CHECK(r->reasons == 0);
  CHECK(r->shards == std::vector<shard_id>{shard_id{0}});
}

TEST_CASE("parsing is strict about types, missing fields, versions and values") {
  CHECK(
      parse_error(
          R"({"version":2,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("version 2") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":"1","invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("\"version\"") != std::string::npos);
  CHECK(
      parse_error(
          R"({"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("missing \"version\"") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":[]})")
          .find("missing \"server\"") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00F3A1C2B4D5E6F7","shards":[3],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("invocation") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":["3"],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("shards") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[-1],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("shards") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3.5],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("shards") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("empty") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3,3],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("twice") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":0,"reasons":[],"server":"s"})")
          .find("budget_ms") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":4294967296,"reasons":[],"server":"s"})")
          .find("budget_ms") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":["nap"],"server":"s"})")
          .find("unknown reason") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":["call","call"],"server":"s"})")
          .find("twice") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":[],"server":"s"})")
          .find("twice") != std::string::npos);
  CHECK(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":[],"server":""})")
          .find("server") != std::string::npos);
  CHECK_FALSE(
      parse_error(
          R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1,"reasons":[],"server":"s"} x)")
          .empty());
  CHECK_FALSE(parse_error(R"([1,2])").empty());
  CHECK_FALSE(parse_error(R"({"version":1,)").empty());
  CHECK_FALSE(parse_error("").empty());
}
