// Limits against abuse (limits.*): connections in total and per peer, the HELLO and frame
// deadlines, the HTTP listeners' connections, the inspector's. Each trips with its error while the
// server keeps serving the others.
#include <doctest/doctest.h>

#include <filesystem>
#include <optional>
#include <thread>
#include <tuple>
#include <vector>

#include "actors/net/descriptor_budget.hpp"
#include "handler_process.hpp"
#include "raw_socket.hpp"
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
  /// /metrics once the admin server takes the connection (a place it just freed may take a
  /// moment to be seen).
  std::string metrics_when_served() {
    for (int i = 0; i < 100; ++i) {
      auto [status, body] = test::http_get(server.admin_port(), "/metrics");
      if (status == 200) return body;
      std::this_thread::sleep_for(20ms);
    }
    FAIL("the admin server never answered /metrics");
    return "";
  }
};

/// True if the sample `name` (with its labels and the space) is in `metrics` with a value >= 1.
bool counted(const std::string& metrics, const std::string& name) {
  auto at = metrics.find(name);
  return at != std::string::npos && std::stod(metrics.substr(at + name.size())) >= 1;
}

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

/// True once the PING's OK arrives (whatever else was still on its way comes first).
bool answers_ping(client::connection& c) {
  c.send(proto::ping{proto::request_head{77}});
  for (;;) {
    auto r = c.receive(5s);
    if (!r) return false;
    if (auto* ok = std::get_if<proto::ok>(&*r); ok && ok->id == 77) return true;
  }
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
  CHECK(counted(f.metrics(), "fusee_limit_refused_total{limit=\"connections_per_peer\"} "));
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
  // The server refuses at the frame's header and reads no more of it, so the rest of this send
  // may fail (the connection is closed under it); the ERR has come either way.
  (void)c.send(proto::call{proto::request_head{3, proto::shard_id{0}, proto::epoch_t{0}}, "start",
                           "steps", proto::bytes(big.begin(), big.end()), 100});
  auto e = refusal(c);
  CHECK(e.code == uint16_t(err_code::too_large));
  CHECK(e.message.find("exceeds the limit of 1048576 (limits.max_frame_mb)") != std::string::npos);
  auto [status, body] = test::http_request("POST", f.server.http_port(), "/v1/workflows/steps/w1",
                                           "\"" + std::string(2000, 'y') + "\"", 5000);
  CHECK(status == 413);
  auto metrics = f.metrics();
  CHECK(counted(metrics, "fusee_limit_refused_total{limit=\"frame_size\"} "));
  CHECK(counted(metrics, "fusee_limit_refused_total{limit=\"http_body\"} "));
  auto other = f.client();
  CHECK(answers_ping(other));
}

TEST_CASE("appends over limits.max_appends_in_flight are refused and the connection goes on") {
  fixture f("max_appends_in_flight = 2\n");
  auto w = f.server.connect();
  auto lease = client::hello(w, proto::offer_serve_calls, 0, "w", 5s);
  REQUIRE(lease);
  auto g = lease->grants.at(0);
  // 200 APPENDs in one write: the session reads them faster than any fdatasync ends.
  proto::bytes burst;
  for (uint64_t i = 0; i < 200; ++i)
    proto::append_frame(burst, proto::append{proto::request_head{100 + i, g.shard, g.epoch},
                                             proto::lsn_t{1 + i},
                                             {proto::bytes{uint8_t(i)}}});
  REQUIRE(w.send_raw(burst));
  size_t refused = 0;
  std::string message;
  uint64_t durable = 0;                    // the shard's last LSN reported durable
  std::vector<bool> answered(200, false);  // by an ERR naming its id (the session's or the log's)
  auto note = [&](const proto::any_message& m) {
    if (auto* d = std::get_if<proto::durable>(&m))
      for (auto& p : d->positions)
        if (p.shard == g.shard) durable = std::max(durable, p.lsn.value());
    if (auto* e = std::get_if<proto::err>(&m); e && e->id >= 100 && e->id < 300)
      answered[e->id - 100] = true;
  };
  // Every APPEND of the burst is answered: refused by the session (too many waiting) or by the
  // log (LSN_GAP after a refused one), or covered by a DURABLE. Then none waits in the log's
  // queue, so none still counts against the limit.
  auto all_answered = [&] {
    for (uint64_t i = 0; i < 200; ++i)
      if (!answered[i] && 1 + i > durable) return false;
    return true;
  };
  while (!all_answered()) {
    auto r = w.receive(5s);
    REQUIRE_MESSAGE(r, (r ? "" : r.err().to_string()));
    note(*r);
    REQUIRE_FALSE(std::holds_alternative<proto::io_failed>(*r));
    if (auto* e = std::get_if<proto::err>(&*r)) {
      REQUIRE_MESSAGE(
          (e->code == uint16_t(err_code::too_large) || e->code == uint16_t(err_code::lsn_gap)),
          e->message);
      if (e->code == uint16_t(err_code::too_large)) {
        ++refused;
        message = e->message;
      }
    }
  }
  CHECK(refused > 0);
  CHECK(message.find("wait for the log (limits.max_appends_in_flight)") != std::string::npos);
  // Taken appends leave the count: the next one (after the last durable LSN) is accepted.
  auto next = durable + 1;
  REQUIRE(w.send(proto::append{
      proto::request_head{900, g.shard, g.epoch}, proto::lsn_t{next}, {proto::bytes{1}}}));
  for (;;) {
    auto r = w.receive(5s);
    REQUIRE(r);
    if (auto* e = std::get_if<proto::err>(&*r)) REQUIRE_MESSAGE(e->id != 900, e->message);
    note(*r);
    if (durable >= next) break;
  }
  CHECK(counted(f.metrics(), "fusee_limit_refused_total{limit=\"appends_in_flight\"} "));
}

namespace {

const std::string request_begun = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n";
const std::string request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";

/// How many descriptors the process has open.
size_t descriptors(int pid) {
  auto fds = std::filesystem::path("/proc") / std::to_string(pid) / "fd";
  return size_t(std::distance(std::filesystem::directory_iterator(fds), {}));
}

}  // namespace

TEST_CASE("the admin server holds at most limits.max_http_connections and closes more as they "
          "come, said in the log and /metrics, while the workers' listener serves") {
  fixture f("max_http_connections = 2\n");
  std::vector<test::raw_socket> held;
  for (int i = 0; i < 2; ++i)
    held.emplace_back(f.server.admin_port(), request_begun);
  // Each extra connection is closed without an answer; the descriptors do not grow with them.
  size_t before = descriptors(f.server.pid());
  for (int i = 0; i < 20; ++i) {
    test::raw_socket extra(f.server.admin_port(), request);
    auto got = extra.read(5s);
    REQUIRE(got);
    CHECK(got->empty());
  }
  CHECK(descriptors(f.server.pid()) <= before + 4);  // not 20 more: some other file, at most
  auto worker = f.client();
  CHECK(answers_ping(worker));
  held.pop_back();  // a place frees: the next request is served
  auto m = f.metrics_when_served();
  CHECK(counted(m, "fusee_limit_refused_total{limit=\"http_connections\"} "));
  CHECK(m.find("fusee_http_connections{listener=\"admin\"} ") != std::string::npos);
  CHECK(f.server.log().find("2 connections are open (limits.max_http_connections): new "
                            "ones are closed as they come") != std::string::npos);
}

TEST_CASE("fusee handler serves at most --max-connections and closes more, naming that option "
          "and its bound port in the log") {
  test::handler_process h({"--max-connections", "1"});
  test::raw_socket held(h.port, request_begun);
  test::raw_socket extra(h.port, request);
  auto got = extra.read(5s);
  REQUIRE(got);
  CHECK(got->empty());
  std::string said = "1 connections are open (fusee handler --max-connections): new ones are "
                     "closed as they come listener=127.0.0.1:" +
                     std::to_string(h.port) + " ";
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (h.log().find(said) == std::string::npos && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(10ms);  // polls the log for the line, with a deadline
  CHECK_MESSAGE(h.log().find(said) != std::string::npos, h.log());
}

TEST_CASE("an HTTP API client that gives up on a waiting request frees its connection at once, "
          "and /metrics counts it") {
  fixture f("max_http_connections = 1\n");
  {  // no worker: the result call parks (30 s), the request waits suspended
    test::raw_socket gave_up(f.server.http_port(),
                             "GET /v1/workflows/w1?wait_ms=30000 HTTP/1.1\r\nHost: "
                             "127.0.0.1\r\n\r\n");
    CHECK_FALSE(gave_up.read(500ms));
  }  // closed
  bool counted = false;
  for (int i = 0; i < 250 && !counted; ++i) {
    counted = f.metrics().find("fusee_http_clients_gone_total{listener=\"http\"} 1\n") !=
              std::string::npos;
    if (!counted) std::this_thread::sleep_for(20ms);
  }
  CHECK(counted);
  test::raw_socket next(f.server.http_port(), request);  // the one place serves it
  auto answer = next.read(5s);
  REQUIRE(answer);
  CHECK(answer->rfind("HTTP/1.1 ", 0) == 0);
}

TEST_CASE("the HTTP API holds at most limits.max_http_connections and lets more wait until one "
          "closes") {
  fixture f("max_http_connections = 2\n");
  std::vector<test::raw_socket> held;
  for (int i = 0; i < 2; ++i)
    held.emplace_back(f.server.http_port(), request_begun);
  test::raw_socket waiting(f.server.http_port(), request);
  CHECK_FALSE(waiting.read(1s));  // neither answered nor closed: in the accept queue
  CHECK(f.metrics().find("fusee_http_connections{listener=\"http\"} 2\n") != std::string::npos);
  held.pop_back();
  auto answer = waiting.read(5s);
  REQUIRE(answer);
  CHECK(answer->rfind("HTTP/1.1 ", 0) == 0);
  CHECK(f.server.log().find("2 connections are open (limits.max_http_connections): new "
                            "ones wait in the kernel's accept queue") != std::string::npos);
}

TEST_CASE("the inspector holds at most 32 connections and closes more as they come: fusee inspect "
          "says why, the log and /metrics say so, and it is served once one closes") {
  fixture f("");
  auto inspect = [&] {
    return test::run_process({test::fusee_binary(), "inspect", "--node",
                              "127.0.0.1:" + std::to_string(f.server.inspect_port())},
                             f.dir.path() / "inspect.out", 30s);
  };
  size_t before = descriptors(f.server.pid());
  // Each sends one byte, so the front no longer counts it as silent, and CAF waits for the rest
  // of its handshake for ever; four from each of eight addresses (an address may have 8 silent
  // ones at once, until the front reads their byte).
  std::vector<test::raw_socket> held;
  for (uint32_t i = 0; i < server::inspect_connections; ++i)
    held.emplace_back(f.server.inspect_port(), std::string(1, '\0'),
                      "127.0.0." + std::to_string(2 + i / 4));
  // (The 32 are taken once the front has seen them: until then a 33rd may take a place.)
  std::optional<std::string> closed;
  for (int i = 0; i < 100 && closed != std::string{}; ++i) {
    test::raw_socket extra(f.server.inspect_port());
    closed = extra.read(100ms);
  }
  REQUIRE(closed == std::string{});
  for (int i = 0; i < 20; ++i) {
    test::raw_socket extra(f.server.inspect_port());
    CHECK(extra.read(5s) == std::string{});
  }
  // Three for each held connection (the front's two sockets, CAF's end), none for the others.
  CHECK(descriptors(f.server.pid()) <= before + 3 * server::inspect_connections + 4);
  auto [rc, out] = inspect();
  CHECK(rc == 1);
  CHECK_MESSAGE(out.find("the port took the connection and closed it: is the node's inspector "
                         "at its limits (32 connections, 8 per address still in their handshake; "
                         "its log says which)?") != std::string::npos,
                out);
  auto worker = f.client();
  CHECK(answers_ping(worker));
  held.pop_back();  // a place frees: fusee inspect is served
  for (int i = 0; i < 100 && rc != 0; ++i) {
    std::tie(rc, out) = inspect();
    if (rc != 0) std::this_thread::sleep_for(20ms);  // until the front has seen the close
  }
  CHECK_MESSAGE(rc == 0, out);
  CHECK(out.find("directory") != std::string::npos);
  CHECK(counted(f.metrics(), "fusee_limit_refused_total{limit=\"inspect_connections\"} "));
  CHECK(f.server.log().find("32 connections are open (the inspector's 32): new ones are closed "
                            "as they come listener=inspector peer=127.0.0.1:") !=
        std::string::npos);
}

TEST_CASE("the inspector closes a connection that sends nothing within limits.hello_timeout_ms, "
          "and holds only 8 such from one address at once") {
  fixture f("hello_timeout_ms = 3000\n");  // (the nine come well within it)
  std::vector<test::raw_socket> silent;
  for (int i = 0; i < 8; ++i)
    silent.emplace_back(f.server.inspect_port());
  test::raw_socket ninth(f.server.inspect_port());
  CHECK(ninth.read(2s) == std::string{});  // at once, not after the 3-s time-out
  for (auto& s : silent)
    CHECK(s.closed_within(15s));  // after 3 s (CAF's handshake bytes come first)
  auto [rc, out] = test::run_process({test::fusee_binary(), "inspect", "--node",
                                      "127.0.0.1:" + std::to_string(f.server.inspect_port())},
                                     f.dir.path() / "inspect.out", 30s);
  CHECK_MESSAGE(rc == 0, out);
  auto log = f.server.log();
  CHECK(log.find("8 connections from 127.0.0.1 have sent nothing yet: new ones are closed as they "
                 "come listener=inspector") != std::string::npos);
  CHECK(log.find("nothing sent within 3000 ms, closing listener=inspector") != std::string::npos);
}
