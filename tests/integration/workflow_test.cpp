// The workflow runtime end to end: `fusee server`, `fusee worker` and `fusee handler` processes on
// loopback, driven through the workflow client and the HTTP API. Step bodies of the demo
// workflows append each execution to FUSEE_TRACE_FILE, which the tests read.
#include <doctest/doctest.h>

#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "handler_process.hpp"
#include "protocol/shard_hash.hpp"
#include "raw_socket.hpp"
#include "server_process.hpp"
#include "worker/client.hpp"
#include "worker/fleet.hpp"
#include "worker_process.hpp"

using namespace fusee;
using namespace fusee::test;
using worker::json;
using namespace std::chrono_literals;

namespace {

/// The trace: executions per "<workflow> <step>".
std::map<std::string, int> executions(const std::filesystem::path& trace) {
  std::map<std::string, int> out;
  std::istringstream in(read_file(trace));
  std::string wf, step, rest;
  while (in >> wf >> step && std::getline(in, rest))
    ++out[wf + " " + step];
  return out;
}

/// Steps 1..n of `workflow` each ran exactly once.
void check_each_step_ran_once(const std::filesystem::path& trace, const std::string& workflow,
                              int n) {
  auto runs = executions(trace);
  for (int i = 1; i <= n; ++i)
    CHECK_MESSAGE(runs[workflow + " step-" + std::to_string(i)] == 1, workflow, " step ", i);
}

/// A temporary directory whose `trace` the step bodies of processes started from now on append to.
struct traced_dir {
  temp_dir dir;
  std::filesystem::path trace = dir.path() / "trace";
  traced_dir() { ::setenv("FUSEE_TRACE_FILE", trace.c_str(), 1); }
  std::filesystem::path path() const { return dir.path(); }
};

worker::workflow_client connect_client(uint16_t port) {
  auto c = worker::workflow_client::connect("127.0.0.1:" + std::to_string(port), "test");
  REQUIRE_MESSAGE(c, (c ? "" : c.err().message));
  return std::move(*c);
}

/// A started server (`shards` shards, more TOML in `extra_toml`) with one long-lived worker that
/// holds every shard, and a client.
struct served {
  server_process server;
  std::unique_ptr<worker_process> worker;
  served(const std::filesystem::path& dir, int shards, const std::string& extra_toml = "")
      : server(dir / "data", "[server]\nshards = " + std::to_string(shards) + "\n" + extra_toml) {
    REQUIRE(server.start() == "");
    worker = std::make_unique<worker_process>(server.port(), "worker");
    REQUIRE(worker->logged("holding " + std::to_string(shards) + " shard(s)"));
  }
  worker::workflow_client client() { return connect_client(server.port()); }
};

constexpr const char* fast_liveness = "[liveness]\nping_interval_ms = 100\ntimeout_ms = 400\n";

worker::call_answer must(proto::result<worker::call_answer> r) {
  REQUIRE_MESSAGE(r, (r ? "" : r.err().message));
  return std::move(*r);
}

/// An id whose shard differs from `other`'s.
std::string id_on_another_shard(const std::string& prefix, const std::string& other,
                                uint32_t shards) {
  for (int i = 0;; ++i) {
    auto id = prefix + std::to_string(i);
    if (proto::shard_for(id, shards) != proto::shard_for(other, shards)) return id;
  }
}

std::string endpoint_config(const std::filesystem::path& dir, uint16_t handler_port,
                            const std::string& endpoint_extra = "") {
  auto secret = (dir / "ep.secret").string();
  std::ofstream(secret) << "s3cret-s3cret-s3cret\n";
  return "[server]\nshards = 4\n[invoker]\nclose_grace_ms = 300\n[[endpoint]]\nurl = "
         "\"http://127.0.0.1:" +
         std::to_string(handler_port) + "/invoke\"\nsecret_file = \"" + secret + "\"\n" +
         endpoint_extra;
}

/// A fleet run on a thread of its own, stopped and joined on every way out, a failed REQUIRE too.
struct running_fleet {
  worker::fleet& f;
  std::thread t;
  explicit running_fleet(worker::fleet& fl) : f(fl), t([this] { f.run(); }) {}
  ~running_fleet() {
    f.stop();
    if (t.joinable()) t.join();
  }
};

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1))
    ++n;
  return n;
}

}  // namespace

TEST_CASE(
    "a start with no worker connected is run by an invoked handler and its result is readable "
    "over HTTP") {
  temp_dir dir;
  handler_process handler{{"--mode", "workflows"}};
  server_process server(dir.path() / "data", endpoint_config(dir.path(), handler.port));
  REQUIRE(server.start() == "");
  auto [st, body] =
      http_request("POST", server.http_port(), "/v1/workflows/steps/first", R"({"steps":3})");
  REQUIRE_MESSAGE(st == 201, body);
  auto [rs, rbody] = http_request("GET", server.http_port(), "/v1/workflows/first?wait_ms=10000");
  REQUIRE_MESSAGE(rs == 200, rbody);
  auto r = json::parse(rbody);
  CHECK(r["status"] == "completed");
  CHECK(r["result"]["steps"].size() == 3);
  CHECK(count(handler.log(), "fusee handler: invocation ") >= 1);
}

TEST_CASE("a sleeping workflow is resumed by a timer invocation and no invocation is made while it "
          "sleeps") {
  temp_dir dir;
  handler_process handler{{"--mode", "workflows"}};
  server_process server(dir.path() / "data", endpoint_config(dir.path(), handler.port));
  REQUIRE(server.start() == "");
  auto started = std::chrono::steady_clock::now();
  auto [st, body] = http_request("POST", server.http_port(), "/v1/workflows/steps/sleeper",
                                 R"({"steps":2,"sleep_ms":1500})");
  REQUIRE_MESSAGE(st == 201, body);
  // The next invocation is the timer's, at its due time; none before it.
  REQUIRE(await([&] { return handler.log().find("reasons [timer]") != std::string::npos; }));
  auto woke = std::chrono::steady_clock::now();
  CHECK(woke - started >= 1400ms);
  auto log = handler.log();
  CHECK(count(log, "fusee handler: invocation ") == 2);
  auto [rs, rbody] = http_request("GET", server.http_port(), "/v1/workflows/sleeper?wait_ms=5000");
  REQUIRE(rs == 200);
  auto r = json::parse(rbody);
  CHECK(r["status"] == "completed");
  CHECK(r["result"]["steps"].size() == 2);
}

TEST_CASE("a step longer than budget + grace is fenced each time: the try that wrote nothing is a "
          "crash and no progress, and the endpoint is no failure") {
  temp_dir dir;
  handler_process handler{{"--mode", "workflows"}};
  server_process server(dir.path() / "data", endpoint_config(dir.path(), handler.port,
                                                             "budget_ms = 1000\ngrace_ms = 300\n"));
  REQUIRE(server.start() == "");
  auto invoker = [&] {
    auto [st, body] = http_request("GET", server.admin_port(), "/v1/invoker");
    REQUIRE_MESSAGE(st == 200, body);
    return json::parse(body);
  };
  // The start-up invocation first, so that the slow run's shard is invoked on its own.
  REQUIRE(await([&] {
    auto j = invoker();
    return j["endpoints"][0]["succeeded"].get<int>() >= 1 && j["invokingShards"].get<int>() == 0;
  }));
  // (A durable sleep before the step, so that the start is answered and written before the step
  // holds the worker's thread.)
  auto [st, body] = http_request("POST", server.http_port(), "/v1/workflows/steps/slow",
                                 R"({"steps":1,"step_ms":3000,"sleep_each_ms":100})");
  REQUIRE_MESSAGE(st == 201, body);
  // The first try wrote the start (a crash); the next recovers the run, runs the step again and
  // is fenced with nothing written.
  json j;
  REQUIRE(await([&] {
    j = invoker();
    return j["noProgress"].get<int>() >= 1;
  }));
  CHECK(j["crashes"].get<int>() >= 2);
  CHECK(j["endpoints"][0]["timedOut"].get<int>() >= 2);
  CHECK(j["endpoints"][0]["failed"].get<int>() == 0);  // the endpoint itself was up
  CHECK(server.log().find("a shard's invocation did not answer within budget + grace and nothing "
                          "was written to the shard") != std::string::npos);
}

TEST_CASE("kill -9 of a worker mid-workflow lets a standby recover the shard and no completed step "
          "body runs twice") {
  traced_dir dir;
  auto& trace = dir.trace;
  server_process server(dir.path() / "data", "[server]\nshards = 4\n");
  REQUIRE(server.start() == "");
  worker_process a(server.port(), "worker-a");
  REQUIRE(a.logged("holding 4 shard(s)"));
  worker_process b(server.port(), "worker-b");
  REQUIRE(b.logged("holding 0 shard(s)"));  // a standby

  auto c = connect_client(server.port());
  CHECK(must(c.start("steps", "wf", json{{"steps", 6}, {"wait", "go"}})).ok());
  // describe answers once what it shows is durable: steps 1-3 are.
  REQUIRE(await([&] {
    auto d = must(c.describe("wf"));
    return d.body.value("current", "") == "waiting for signal 'go'";
  }));
  a.kill9();
  // Until the server has seen the connection end, a call may still be relayed to the dead worker
  // (answered "may have run", status 3); a describe is safe to repeat, and once the standby
  // answers one, it holds the shard.
  REQUIRE(await([&] { return must(c.describe("wf")).ok(); }));
  auto s = must(c.signal("wf", "go", "after the crash"));
  CHECK_MESSAGE(s.ok(), s.body.dump());
  auto r = must(c.result("wf", 10000));
  REQUIRE_MESSAGE(r.body["status"] == "completed", r.body.dump());
  CHECK(r.body["result"]["signal"] == "after the crash");
  check_each_step_ran_once(trace, "wf", 6);
}

TEST_CASE("a signal retried with its idempotency key after kill -9 of the worker that took it is "
          "answered as a duplicate by the standby and the run hears it once") {
  temp_dir dir;
  server_process server(dir.path() / "data", "[server]\nshards = 4\n");
  REQUIRE(server.start() == "");
  worker_process a(server.port(), "worker-a");
  REQUIRE(a.logged("holding 4 shard(s)"));
  worker_process b(server.port(), "worker-b");
  REQUIRE(b.logged("holding 0 shard(s)"));

  auto c = connect_client(server.port());
  CHECK(must(c.start("steps", "wf", json{{"steps", 2}, {"wait", "go"}})).ok());
  auto s = must(c.signal("wf", "go", "once", 0, "go-1"));
  REQUIRE_MESSAGE(s.ok(), s.body.dump());
  CHECK(s.body["duplicate"] == false);
  auto r = must(c.result("wf", 10000));
  REQUIRE_MESSAGE(r.body["status"] == "completed", r.body.dump());
  a.kill9();
  REQUIRE(await([&] { return must(c.describe("wf")).ok(); }));  // the standby holds the shard
  auto again = must(c.signal("wf", "go", "once", 0, "go-1"));
  CHECK_MESSAGE(again.ok(), again.body.dump());
  CHECK(again.body["duplicate"] == true);
  auto other = must(c.signal("wf", "go", "twice", 0, "go-2"));  // a new key: the run ended
  CHECK(other.body.value("code", "") == "finished");
  CHECK(must(c.result("wf")).body["result"]["signal"] == "once");
}

TEST_CASE("kill -9 of the server mid-workflow 10 times keeps every result seen before a kill and "
          "the workflow finishes with the same step results") {
  traced_dir dir;
  auto& trace = dir.trace;
  server_process server(dir.path() / "data", "[server]\nshards = 4\n");
  server.keep_ports();
  REQUIRE(server.start() == "");
  worker_process w(server.port(), "worker", {"--checkpoint-every", "7"});
  REQUIRE(w.logged("holding 4 shard(s)"));

  json first_half;
  std::map<std::string, json> seen;  // results read before a kill
  {
    auto c = connect_client(server.port());
    CHECK(must(c.start("steps", "long", json{{"steps", 8}, {"wait", "go"}, {"wait_ms", 600000}}))
              .ok());
    auto d = must(c.describe("long"));
    REQUIRE(d.body["steps"].size() == 4);
    first_half = d.body["steps"];
  }
  for (int k = 0; k < 10; ++k) {
    {
      auto c = connect_client(server.port());
      auto id = "short-" + std::to_string(k);
      CHECK(must(c.start("steps", id, json{{"steps", 5}})).ok());
      auto r = must(c.result(id, 10000));
      REQUIRE(r.body["status"] == "completed");
      seen[id] = r.body["result"];
    }
    server.kill9();
    REQUIRE(server.start() == "");
    auto c = connect_client(server.port());  // calls park until the worker is back
    auto d = must(c.describe("long"));
    CHECK_MESSAGE(d.body["steps"] == first_half, "after kill ", k);
    for (auto& [id, result] : seen)
      CHECK_MESSAGE(must(c.result(id)).body["result"] == result, id);
  }
  auto c = connect_client(server.port());
  CHECK(must(c.signal("long", "go", 1)).ok());
  auto r = must(c.result("long", 10000));
  REQUIRE(r.body["status"] == "completed");
  auto steps = r.body["result"]["steps"];
  REQUIRE(steps.size() == 8);
  for (int i = 0; i < 4; ++i)
    CHECK(steps[i] == first_half[i]["value"]);
  check_each_step_ran_once(trace, "long", 8);
}

TEST_CASE("signals before and after the wait and a time-out and a child and a message on other "
          "shards are each delivered once") {
  temp_dir dir;
  served node(dir.path(), 4);
  auto c = node.client();

  SUBCASE("a signal sent while the run still sleeps waits in its inbox") {
    CHECK(must(c.start("steps", "early", json{{"steps", 2}, {"sleep_ms", 500}, {"wait", "go"}}))
              .ok());
    CHECK(must(c.signal("early", "go", "first")).ok());
    auto r = must(c.result("early", 10000));
    CHECK(r.body["result"]["signal"] == "first");
  }
  SUBCASE("a signal sent while the run waits wakes it") {
    CHECK(must(c.start("steps", "late", json{{"steps", 2}, {"wait", "go"}})).ok());
    REQUIRE(await([&] {
      return must(c.describe("late")).body.value("current", "") == "waiting for signal 'go'";
    }));
    CHECK(must(c.signal("late", "go", "second")).ok());
    CHECK(must(c.result("late", 10000)).body["result"]["signal"] == "second");
  }
  SUBCASE("a wait times out") {
    CHECK(
        must(c.start("steps", "alone", json{{"steps", 2}, {"wait", "go"}, {"wait_ms", 300}})).ok());
    CHECK(must(c.result("alone", 10000)).body["result"]["signal"] == "timed out");
  }
  SUBCASE("a child on another shard tells its parent it is done") {
    auto child = id_on_another_shard("child-", "parent", c.shard_count());
    CHECK(must(c.start("steps", "parent", json{{"steps", 1}, {"children", {child}}})).ok());
    auto r = must(c.result("parent", 10000));
    REQUIRE_MESSAGE(r.body["status"] == "completed", r.body.dump());
    CHECK(r.body["result"]["children"] == json::array({json{{"child", child}}}));
    auto cr = must(c.describe(child));
    CHECK(cr.body["status"] == "completed");
    CHECK(cr.body["parent"] == "parent");
  }
  SUBCASE("a reminder's message reaches a workflow on another shard once") {
    auto target = id_on_another_shard("target-", "reminder-1", c.shard_count());
    CHECK(must(c.start("steps", target, json{{"steps", 2}, {"wait", "nudge"}})).ok());
    CHECK(must(c.start("reminder", "reminder-1",
                       json{{"delay_ms", 100},
                            {"target", target},
                            {"signal", "nudge"},
                            {"message", "hi"}}))
              .ok());
    auto r = must(c.result(target, 10000));
    REQUIRE_MESSAGE(r.body["status"] == "completed", r.body.dump());
    CHECK(r.body["result"]["signal"]["message"] == "hi");
    CHECK(must(c.result("reminder-1", 10000)).body["status"] == "completed");
    // A second delivery would sit in the finished run's inbox; finished runs drop signals, so
    // ask a waiting twin instead: one more signal arrives only if sent again.
    auto d = must(c.describe(target));
    CHECK(d.body["status"] == "completed");
  }
}

TEST_CASE("an unknown workflow type is refused naming the registered types and other refusals get "
          "fitting HTTP statuses") {
  temp_dir dir;
  served node(dir.path(), 4);
  auto c = node.client();
  auto r = must(c.start("no-such-type", "x", nullptr));
  CHECK(r.status == proto::call_status::failed);
  CHECK(r.error() ==
        "unknown workflow type 'no-such-type'; this worker has: checkout, reminder, steps");

  auto h = node.server.http_port();
  CHECK(http_request("POST", h, "/v1/workflows/no-such-type/x").first == 400);
  CHECK(http_request("GET", h, "/v1/workflows/missing").first == 404);
  CHECK(http_request("POST", h, "/v1/workflows/steps/s1", "{\"steps\":1}").first == 201);
  CHECK(http_request("POST", h, "/v1/workflows/steps/s1", "{\"steps\":1}").first == 200);
  CHECK(http_request("POST", h, "/v1/workflows/reminder/s1", "{}").first == 409);
  CHECK(http_request("POST", h, "/v1/workflows/steps/s2", "{not json").first == 400);
  CHECK(http_request("GET", h, "/v1/workflows/s1?wait_ms=lots").first == 400);
  CHECK(http_request("DELETE", h, "/v1/workflows/s1").first == 405);
  CHECK(http_request("GET", h, "/v2/things").first == 404);
  // The demo's inputs are checked: a count no int holds fails the run, naming it.
  CHECK(http_request("POST", h, "/v1/workflows/steps/huge", "{\"steps\":1e12}").first == 201);
  auto [rs, rbody] = http_request("GET", h, "/v1/workflows/huge?wait_ms=10000");
  auto huge = json::parse(rbody);
  CHECK_MESSAGE(huge["status"] == "failed", rbody);
  CHECK_MESSAGE(huge.dump().find("must be an integer from") != std::string::npos, rbody);
}

TEST_CASE("a run whose id holds '/' is reached through the HTTP API with %2F, whether HTTP or "
          "the protocol started it") {
  temp_dir dir;
  served node(dir.path(), 4);
  auto h = node.server.http_port();
  auto [st, body] = http_request("POST", h, "/v1/workflows/steps/orders%2F1", R"({"steps":1})");
  REQUIRE_MESSAGE(st == 201, body);
  auto [rs, rbody] = http_request("GET", h, "/v1/workflows/orders%2F1?wait_ms=10000");
  REQUIRE_MESSAGE(rs == 200, rbody);
  CHECK(json::parse(rbody)["status"] == "completed");
  // Not the run "orders" (none) nor a route: the unescaped '/' still separates.
  CHECK(http_request("GET", h, "/v1/workflows/orders").first == 404);
  CHECK(http_request("GET", h, "/v1/workflows/orders/1").first == 404);

  auto c = node.client();
  REQUIRE(must(c.start("steps", "tenant/7/order", json{{"steps", 1}})).ok());
  auto [ps, pbody] = http_request("GET", h, "/v1/workflows/tenant%2F7%2Forder?wait_ms=10000");
  REQUIRE_MESSAGE(ps == 200, pbody);
  CHECK(json::parse(pbody)["status"] == "completed");
  auto [ds, dbody] = http_request("GET", h, "/v1/workflows/tenant%2f7%2forder/describe");
  CHECK_MESSAGE(ds == 200, dbody);
}

TEST_CASE("the demo checkout through the HTTP API with an invoked handler retries the charge and "
          "ships after the review signal") {
  temp_dir dir;
  handler_process handler{{"--mode", "workflows"}};
  server_process server(dir.path() / "data", endpoint_config(dir.path(), handler.port));
  REQUIRE(server.start() == "");
  auto h = server.http_port();
  auto [st, body] = http_request("POST", h, "/v1/workflows/checkout/order-1",
                                 R"({"amount": 40, "fail_charge_times": 2})");
  REQUIRE_MESSAGE(st == 201, body);
  REQUIRE(await([&] {
    auto [s, b] = http_request("GET", h, "/v1/workflows/order-1/describe");
    return s == 200 && json::parse(b).value("current", "") == "waiting for signal 'review'";
  }));
  // With an Idempotency-Key, a retried signal is taken once: the second POST is answered as a
  // duplicate and the run's inbox holds one.
  for (bool duplicate : {false, true}) {
    auto [ns, nbody] = http_request("POST", h, "/v1/workflows/order-1/signals/note", "\"hi\"",
                                    30000, {"Idempotency-Key: note-1"});
    REQUIRE_MESSAGE(ns == 200, nbody);
    CHECK_MESSAGE(json::parse(nbody)["duplicate"] == duplicate, nbody);
  }
  auto [ds, dbody] = http_request("GET", h, "/v1/workflows/order-1/describe");
  REQUIRE(ds == 200);
  CHECK_MESSAGE(json::parse(dbody)["pending_signals"].size() == 1, dbody);
  auto [ss, sbody] = http_request("POST", h, "/v1/workflows/order-1/signals/review",
                                  R"({"approved": true})", 30000, {"Idempotency-Key: review-1"});
  CHECK_MESSAGE(ss == 200, sbody);
  auto [rs, rbody] = http_request("GET", h, "/v1/workflows/order-1?wait_ms=10000");
  REQUIRE(rs == 200);
  auto r = json::parse(rbody);
  CHECK(r["status"] == "completed");
  CHECK(r["result"]["status"] == "shipped");
  CHECK(r["result"]["total"] == 48.0);
  // A signal to a finished run is a conflict, unless it is a retry of one the run took;
  // cancelling it changes nothing.
  CHECK(http_request("POST", h, "/v1/workflows/order-1/signals/review", "{}").first == 409);
  auto [again, again_body] =
      http_request("POST", h, "/v1/workflows/order-1/signals/review", R"({"approved": true})",
                   30000, {"Idempotency-Key: review-1"});
  CHECK_MESSAGE(again == 200, again_body);
  CHECK_MESSAGE(json::parse(again_body)["duplicate"] == true, again_body);
  auto [cs, cbody] = http_request("POST", h, "/v1/workflows/order-1/cancel");
  CHECK(cs == 200);
  CHECK(json::parse(cbody)["status"] == "completed");
}

TEST_CASE(
    "an invoked worker leaves before its budget ends and the next invocation goes on where it "
    "stopped") {
  traced_dir dir;
  auto& trace = dir.trace;
  handler_process handler{{"--mode", "workflows"}};
  server_process server(dir.path() / "data",
                        endpoint_config(dir.path(), handler.port, "budget_ms = 1500\n"));
  REQUIRE(server.start() == "");
  // 12 steps with a 200 ms sleep before each: longer than one budget, and never idle for long.
  auto [st, body] = http_request("POST", server.http_port(), "/v1/workflows/steps/long-run",
                                 R"({"steps":12,"sleep_each_ms":200})");
  REQUIRE_MESSAGE(st == 201, body);
  auto [rs, rbody] =
      http_request("GET", server.http_port(), "/v1/workflows/long-run?wait_ms=20000", "", 40000);
  REQUIRE_MESSAGE(rs == 200, rbody);
  auto r = json::parse(rbody);
  REQUIRE_MESSAGE(r["status"] == "completed", rbody);
  CHECK(r["result"]["steps"].size() == 12);
  auto log = handler.log();
  CHECK(count(log, "fusee handler: invocation ") >= 2);  // one budget was not enough
  // Each invocation ended by itself before its budget ran out: none timed out, none crashed.
  auto inv = json::parse(http_get(server.admin_port(), "/v1/invoker").second);
  CHECK(inv["endpoints"][0]["timedOut"] == 0);
  CHECK(inv["endpoints"][0]["failed"] == 0);
  CHECK(inv["crashes"] == 0);
  check_each_step_ran_once(trace, "long-run", 12);
}

TEST_CASE("an idle long-lived worker keeps its leases by pinging") {
  temp_dir dir;
  served node(dir.path(), 2, fast_liveness);
  auto c = node.client();
  CHECK(must(c.start("steps", "before", json{{"steps", 1}})).ok());
  // Five liveness time-outs without a call: the worker's pings keep its leases.
  std::this_thread::sleep_for(2000ms);
  CHECK(must(c.start("steps", "after", json{{"steps", 1}})).ok());
  auto log = node.worker->log();
  CHECK(log.find("revoked") == std::string::npos);
  CHECK(log.find("connection lost") == std::string::npos);
  CHECK(count(log, "connected to") == 1);
}

TEST_CASE("a worker stopped with SIGTERM checkpoints its shards and the next worker goes on from "
          "there") {
  traced_dir dir;
  auto& trace = dir.trace;
  server_process server(dir.path() / "data", "[server]\nshards = 2\n");
  REQUIRE(server.start() == "");
  auto c = connect_client(server.port());
  {
    worker_process w(server.port(), "first");
    REQUIRE(w.logged("holding 2 shard(s)"));
    CHECK(must(c.start("steps", "paused", json{{"steps", 4}, {"wait", "go"}})).ok());
    CHECK(w.terminate() == 0);
    CHECK(w.log().find("stopping") != std::string::npos);
  }
  // The stop wrote a checkpoint of the shard that has records (the other has none to cover).
  auto shard = proto::shard_for("paused", 2).value();
  CHECK(std::filesystem::exists(dir.path() / "data" / "checkpoints" /
                                ("shard-" + std::to_string(shard) + ".ckpt")));
  CHECK(!std::filesystem::exists(dir.path() / "data" / "checkpoints" /
                                 ("shard-" + std::to_string(1 - shard) + ".ckpt")));
  worker_process next(server.port(), "second");
  REQUIRE(next.logged("holding 2 shard(s)"));
  CHECK(must(c.signal("paused", "go", "resumed")).ok());
  auto r = must(c.result("paused", 10000));
  REQUIRE_MESSAGE(r.body["status"] == "completed", r.body.dump());
  check_each_step_ran_once(trace, "paused", 4);
}

TEST_CASE("a worker stopped while a silent port has its HELLO stops within 2 s, not after the "
          "10-s wait, with no retry announced") {
  loopback_listener silent;  // accepts and answers nothing, as an HTTP listener does
  worker_process w(silent.port, "patient");
  int fd = silent.accept_one();
  REQUIRE(fd >= 0);
  // The HELLO came (the worker now waits up to 10 s for its answer).
  char buf[64];
  pollfd p{fd, POLLIN, 0};
  REQUIRE(::poll(&p, 1, 5000) == 1);
  REQUIRE(::recv(fd, buf, sizeof buf, 0) > 0);
  CHECK(w.terminate(2s) == 0);
  CHECK_MESSAGE(w.log().find("retrying") == std::string::npos, w.log());
  ::close(fd);
}

TEST_CASE("a step body that works longer than the liveness time-out does not cost the worker its "
          "leases") {
  traced_dir dir;
  auto& trace = dir.trace;
  served node(dir.path(), 2, fast_liveness);
  auto c = node.client();
  // Two steps of 1 s each: 2.5 liveness time-outs apiece while the loop's thread is busy.
  auto started = must(c.start("steps", "slow", json{{"steps", 2}, {"step_ms", 1000}}));
  REQUIRE_MESSAGE(started.ok(), started.body.dump());
  auto r = must(c.result("slow", 10000));
  REQUIRE_MESSAGE(r.body["status"] == "completed", r.body.dump());
  auto log = node.worker->log();
  CHECK(log.find("revoked") == std::string::npos);
  CHECK(log.find("connection lost") == std::string::npos);
  check_each_step_ran_once(trace, "slow", 2);
}

TEST_CASE("a run busy with step after step hears a cancel before its next step, not after its "
          "last, and its start is answered without waiting for all of them") {
  traced_dir dir;
  auto& trace = dir.trace;
  served node(dir.path(), 2);
  auto c = node.client();
  // 40 steps of 100 ms, none waiting for anything: 4 s of steps in one go.
  auto r = must(c.start("steps", "busy", json{{"steps", 40}, {"step_ms", 100}}));
  CHECK_MESSAGE(r.body["status"] == "running", r.body.dump());
  auto x = must(c.cancel("busy"));
  CHECK_MESSAGE(x.ok(), x.body.dump());
  auto done = must(c.result("busy", 10000));
  CHECK_MESSAGE(done.body["status"] == "cancelled", done.body.dump());
  auto runs = executions(trace);
  int ran = 0;
  for (int i = 1; i <= 40; ++i)
    ran += runs["busy step-" + std::to_string(i)];
  CHECK_MESSAGE(ran < 40, ran, " step bodies ran");
}

TEST_CASE("a run busy with step after step on one shard does not hold up a timer on another "
          "shard of the same worker, whichever shard the worker's loop comes to first") {
  traced_dir dir;
  served node(dir.path(), 2);
  auto c = node.client();
  auto on_shard = [](const std::string& prefix, uint32_t shard) {
    for (int i = 0;; ++i)
      if (proto::shard_for(prefix + std::to_string(i), 2).value() == shard)
        return prefix + std::to_string(i);
  };
  auto busy = on_shard("busy", 0), nap = on_shard("nap", 1);  // the loop ticks shard 0 first
  CHECK(must(c.start("steps", busy, json{{"steps", 40}, {"step_ms", 100}})).ok());
  CHECK(must(c.start("steps", nap, json{{"steps", 2}, {"sleep_ms", 200}})).ok());
  auto napped = must(c.result(nap, 3000));
  CHECK_MESSAGE(napped.body["status"] == "completed", napped.body.dump());
  auto still = must(c.describe(busy));
  CHECK_MESSAGE(still.body["status"] == "running", still.body.dump());  // 4 s of steps
}

TEST_CASE("a worker stalled past the end of its lease runs no more than the step it was in once "
          "it goes on: it reads its connection before the next") {
  traced_dir dir;
  auto& trace = dir.trace;
  server_process server(dir.path() / "data", std::string{"[server]\nshards = 2\n"} + fast_liveness);
  REQUIRE(server.start() == "");
  worker_process a(server.port(), "worker-a");
  REQUIRE(a.logged("holding 2 shard(s)"));
  worker_process b(server.port(), "worker-b");
  REQUIRE(b.logged("holding 0 shard(s)"));  // a standby
  auto c = connect_client(server.port());
  // (Started from another thread: without reading between steps, a answered the start only
  // after all 30.)
  std::thread starter{[&] {
    auto c2 = connect_client(server.port());
    (void)c2.start("steps", "z", json{{"steps", 30}, {"step_ms", 100}});
  }};
  REQUIRE(await([&] { return executions(trace)["z step-3"] >= 1; }));
  ::kill(a.pid, SIGSTOP);  // past the liveness time-out: b takes the shards and ends the run
  starter.join();
  // (A call in flight to a when it stopped is answered "may have run": asked again.)
  REQUIRE(await(
      [&] {
        auto d = must(c.result("z", 5000));
        return d.ok() && d.body["status"] == "completed";
      },
      30s));
  ::kill(a.pid, SIGCONT);
  CHECK(a.logged("lease revoked"));
  auto runs = executions(trace);
  int twice = 0;
  for (int i = 1; i <= 30; ++i) {
    int n = runs["z step-" + std::to_string(i)];
    CHECK_MESSAGE(n >= 1, "step ", i);
    twice += n > 1 ? n - 1 : 0;
  }
  // The step a was in when stopped, and those b ran again because their records were not yet
  // durable; not every step after the stop (over 20 before a read its connection between steps).
  CHECK_MESSAGE(twice <= 3, twice, " step bodies ran again");
}

TEST_CASE("a worker whose code diverges from a run's journal stops only that run and names both "
          "operations") {
  // Both runs live on the same shard: the divergence stops one run, not the shard.
  REQUIRE(proto::shard_for("renamed", 2) == proto::shard_for("order", 2));
  temp_dir dir;
  server_process server(dir.path() / "data", "[server]\nshards = 2\n");
  REQUIRE(server.start() == "");
  auto c = connect_client(server.port());
  {
    worker_process old_code(server.port(), "old-code");
    REQUIRE(old_code.logged("holding 2 shard(s)"));
    CHECK(must(c.start("steps", "renamed", json{{"steps", 4}, {"wait", "go"}})).ok());
    CHECK(must(c.start("checkout", "order", json{{"amount", 5}})).ok());
    REQUIRE(await([&] {
      return must(c.describe("order")).body.value("current", "") == "waiting for signal 'review'";
    }));
  }  // killed
  // The next worker's `steps` names its steps differently, as a deploy of changed code would.
  ::setenv("FUSEE_DEMO_STEP_PREFIX", "v2-", 1);
  worker_process new_code(server.port(), "new-code");
  ::unsetenv("FUSEE_DEMO_STEP_PREFIX");
  REQUIRE(new_code.logged("holding 2 shard(s)"));
  auto d = must(c.describe("renamed"));
  CHECK(d.body["status"] == "stopped");
  CHECK(d.body["error"] ==
        "replay diverged at operation 0 of workflow 'renamed': the journal has step 'step-1', "
        "the code asked for step 'v2-step-1'");
  CHECK(new_code.log().find("replay diverged") != std::string::npos);
  // The other run on the same worker goes on.
  CHECK(must(c.signal("order", "review", json{{"approved", true}})).ok());
  auto r = must(c.result("order", 10000));
  CHECK(r.body["result"]["status"] == "shipped");
}

TEST_CASE("a fleet runs 100 workers on one thread: they keep their leases by pinging, and the "
          "shards of killed workers go to the standbys and every step body runs once") {
  temp_dir dir;
  constexpr uint32_t shards = 64;
  server_process server(dir.path() / "data",
                        "[server]\nshards = " + std::to_string(shards) + "\n" + fast_liveness);
  REQUIRE(server.start() == "");
  std::mutex mu;
  std::map<std::string, int> runs;  // "<workflow>/<step>" -> body executions
  worker::registry types;
  types.add("two", [&](worker::context& ctx, json) -> worker::task<json> {
    for (int k = 0; k < 2; ++k) {
      // (GCC 12: captures and literals are built outside the co_await expression)
      std::string name = "s" + std::to_string(k), key = ctx.id() + "/" + name;
      auto body = [&mu, &runs, key] {
        std::lock_guard lock(mu);
        return ++runs[key];
      };
      co_await ctx.step(name, body);
    }
    co_return json{};
  });
  std::vector<worker::worker_options> options(100);
  for (size_t i = 0; i < options.size(); ++i) {
    options[i].server = "127.0.0.1:" + std::to_string(server.port());
    options[i].name = "fleet-" + std::to_string(i);
    options[i].max_shards = 1;  // 64 hold a shard, 36 stand by
  }
  worker::fleet fleet(types, options);
  running_fleet loop{fleet};
  REQUIRE(await([&] { return fleet.connected() == 100; }));

  auto c = connect_client(server.port());
  auto run_batch = [&](const std::string& prefix) {
    for (int i = 0; i < 128; ++i)
      CHECK(must(c.start("two", prefix + std::to_string(i), json{})).ok());
    for (int i = 0; i < 128; ++i) {
      auto r = must(c.result(prefix + std::to_string(i), 15000));
      CHECK_MESSAGE(r.body.value("status", "") == "completed", r.body.dump());
    }
  };
  run_batch("a");
  // Five liveness time-outs with nothing to do: the fleet's pings keep every lease.
  std::this_thread::sleep_for(2000ms);
  CHECK(fleet.losses() == 0);
  CHECK(fleet.connected() == 100);

  for (size_t i = 0; i < 20; ++i)
    fleet.kill(i, 60s);  // down for the rest of the test
  REQUIRE(await([&] { return fleet.connected() == 80; }));
  CHECK(fleet.kills() == 20);
  run_batch("b");  // the killed workers' shards are served by standbys now
  fleet.stop();
  loop.t.join();
  std::lock_guard lock(mu);
  CHECK(runs.size() == 2 * 256);
  for (auto& [step, n] : runs)
    CHECK_MESSAGE(n == 1, step << " ran " << n << " times");
}

TEST_CASE("a worker whose shards all step at once keeps its APPENDs within the server's "
          "max_appends_in_flight and no shard is given up") {
  temp_dir dir;
  constexpr uint32_t shards = 16;
  server_process server(dir.path() / "data", "[server]\nshards = " + std::to_string(shards) +
                                                 "\n[limits]\nmax_appends_in_flight = 1\n");
  REQUIRE(server.start() == "");
  worker::registry types;
  types.add("steps", [](worker::context& ctx, json) -> worker::task<json> {
    for (int k = 0; k < 5; ++k) {
      std::string name = "s" + std::to_string(k);
      co_await ctx.step(name, [k] { return k; });
    }
    co_return json{};
  });
  std::mutex mu;
  std::string log;
  worker::worker_options o;
  o.server = "127.0.0.1:" + std::to_string(server.port());
  o.name = "w";
  o.max_appends_in_flight = 1;  // the server's limit: at one more it would refuse
  o.log = [&](const std::string& line) {
    std::lock_guard lock(mu);
    log += line + "\n";
  };
  worker::fleet fleet(types, {o});
  running_fleet loop{fleet};
  REQUIRE(await([&] { return fleet.connected() == 1; }));
  auto c = connect_client(server.port());
  for (int i = 0; i < 64; ++i)  // every shard has runs stepping at once
    CHECK(must(c.start("steps", "r" + std::to_string(i), json{})).ok());
  for (int i = 0; i < 64; ++i) {  // (without the window: shards given up, runs stuck)
    auto r = must(c.result("r" + std::to_string(i), 15000));
    REQUIRE_MESSAGE(r.body.value("status", "") == "completed", r.body.dump());
  }
  auto metrics = http_get(server.admin_port(), "/metrics").second;
  CHECK(metrics.find("limit_refused_total{limit=\"appends_in_flight\"} 0") != std::string::npos);
  std::lock_guard lock(mu);
  CHECK_MESSAGE(log.find("refused") == std::string::npos, log);
}
