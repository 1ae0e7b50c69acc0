// Limits against abuse (limits.*): connections in total and per peer, the HELLO and frame
// deadlines. Each trips with its error while the server keeps serving the others.
#include <doctest/doctest.h>

#include <thread>

#include "server_process.hpp"

using namespace fusee;
using namespace std::chrono_literals;
using proto::err_code;

namespace {

struct fixture {
  test::temp_dir dir;
  test::server_process server;
  explicit fixture(const std::string& limits)
      : server(dir.path() / "data", "[server]\nshards = 2\n[limits]\n" + limits) {
    auto err = server.start();
    REQUIRE_MESSAGE(err.empty(), err);
  }
  client::connection client() {
    auto c = server.connect();
    REQUIRE(client::client_hello(c, "cli", 5s));
    return c;
  }
  std::string metrics() { return test::http_get(server.admin_port(), "/metrics").second; }
};

/// The ERR the server sent before closing `c`.
proto::err refusal(client::connection& c) {
  auto r = c.receive(5s);
  REQUIRE_MESSAGE(r, (r ? "" : r.err().to_string()));
  auto* e = std::get_if<proto::err>(&*r);
  REQUIRE_MESSAGE(e != nullptr, "got " << proto::kind_name(uint8_t(proto::kind_of(*r))));
  auto next = c.receive(5s);
  CHECK((!next && c.closed()));
  return *e;
}

bool answers_ping(client::connection& c) {
  c.send(proto::ping{proto::request_head{77}});
  auto r = c.receive(5s);
  return r && std::holds_alternative<proto::ok>(*r);
}

}  // namespace

TEST_CASE("connections over the per-peer limit are refused naming it, the others keep working") {
  fixture f("max_connections_per_peer = 3\n");
  std::vector<client::connection> open;
  for (int i = 0; i < 3; ++i)
    open.push_back(f.client());
  auto extra = f.server.connect();
  auto e = refusal(extra);
  CHECK(e.code == uint16_t(err_code::too_large));
  CHECK(e.message ==
        "3 connections from 127.0.0.1 are open already (limits.max_connections_per_peer): close "
        "some, or share them");
  for (auto& c : open)
    CHECK(answers_ping(c));
  open.pop_back();  // a closed connection frees its place (once its session has ended)
  bool admitted = false;
  for (int i = 0; i < 100 && !admitted; ++i) {
    auto c = f.server.connect();
    admitted = bool(client::client_hello(c, "again", 5s));
    if (!admitted) std::this_thread::sleep_for(20ms);
  }
  CHECK(admitted);
  CHECK(f.metrics().find("fusee_limit_refused_total{limit=\"connections_per_peer\"} ") !=
        std::string::npos);
}

TEST_CASE("connections over the node's limit are refused naming it") {
  fixture f("max_connections = 2\n");
  auto a = f.client();
  auto b = f.client();
  auto extra = f.server.connect();
  auto e = refusal(extra);
  CHECK(e.code == uint16_t(err_code::too_large));
  CHECK(e.message.find("(limits.max_connections)") != std::string::npos);
  CHECK(answers_ping(a));
  CHECK(f.metrics().find("fusee_limit_refused_total{limit=\"connections\"} 1\n") !=
        std::string::npos);
}

TEST_CASE("a connection that says nothing is closed after the HELLO deadline, one that did stays") {
  fixture f("hello_timeout_ms = 300\n");
  auto talker = f.client();
  auto silent = f.server.connect();
  auto started = std::chrono::steady_clock::now();
  auto e = refusal(silent);
  CHECK(std::chrono::steady_clock::now() - started >= 250ms);
  CHECK(e.code == uint16_t(err_code::bad_body));
  CHECK(e.message == "no HELLO or CLIENT_HELLO within 300 ms of connecting "
                     "(limits.hello_timeout_ms)");
  std::this_thread::sleep_for(400ms);  // past the deadline: the client that said hello stays
  CHECK(answers_ping(talker));
  CHECK(f.metrics().find("fusee_limit_refused_total{limit=\"hello_timeout\"} 1\n") !=
        std::string::npos);
}

TEST_CASE("a frame left unfinished is cut after the frame deadline") {
  fixture f("frame_timeout_ms = 300\n");
  auto c = f.client();
  auto frame = proto::encode(proto::ping{proto::request_head{5}});
  frame.resize(frame.size() / 2);
  REQUIRE(c.send_raw(frame));
  auto e = refusal(c);
  CHECK(e.code == uint16_t(err_code::bad_frame));
  CHECK(e.message.find("(limits.frame_timeout_ms)") != std::string::npos);
  auto other = f.client();  // the node keeps serving
  CHECK(answers_ping(other));
}

TEST_CASE(
    "a frame over limits.max_frame_mb and an HTTP body over limits.http_body_kb are refused") {
  fixture f("max_frame_mb = 1\nhttp_body_kb = 1\n");
  auto c = f.client();
  std::string big((1u << 20) + 1, 'x');
  REQUIRE(c.send(proto::call{proto::request_head{3, proto::shard_id{0}, proto::epoch_t{0}}, "start",
                             "steps", proto::bytes(big.begin(), big.end()), 100}));
  auto e = refusal(c);
  CHECK(e.code == uint16_t(err_code::too_large));
  CHECK(e.message.find("exceeds the limit of 1048576 (limits.max_frame_mb)") != std::string::npos);
  auto [status, body] = test::http_request("POST", f.server.http_port(), "/v1/workflows/steps/w1",
                                           "\"" + std::string(2000, 'y') + "\"", 5000);
  CHECK(status == 413);
  auto other = f.client();
  CHECK(answers_ping(other));
}
