// The invoker against real HTTP endpoints on loopback: `fusee handler` processes and endpoints
// served by this test process (to control exactly when and how they answer).
#include <condition_variable>
#include <csignal>
#include <thread>

#include <fcntl.h>
#include <fstream>
#include <mutex>
#include <sys/wait.h>
#include <unistd.h>

#include "app/http_server.hpp"
#include "handler_process.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/shard_hash.hpp"
#include "protocol/signature.hpp"
#include "protocol/unix_time.hpp"
#include "raw_socket.hpp"
#include "server_process.hpp"
#include "worker.hpp"

using namespace fusee;
using namespace fusee::test;

namespace {

std::string endpoint_toml(uint16_t port, const temp_dir& secret_dir, std::string extra = "") {
  auto secret = (secret_dir.path() / "ep.secret").string();
  std::ofstream(secret) << "s3cret-s3cret-s3cret\n";
  return "[server]\nshards = 4\n[invoker]\nclose_grace_ms = 300\n[[endpoint]]\nurl = "
         "\"http://127.0.0.1:" +
         std::to_string(port) + "/invoke\"\nsecret_file = \"" + secret + "\"\n" + extra;
}

std::string metrics(const server_process& s) {
  return http_get(s.admin_port(), "/v1/invoker").second;
}

/// The number after "key": in a flat JSON text (enough for the metrics' integer fields).
long field(const std::string& json, const std::string& key) {
  auto i = json.find("\"" + key + "\":");
  if (i == std::string::npos) return -1;
  return std::stol(json.substr(i + key.size() + 3));
}

/// Waits until `pred(metrics)` holds, for at most 15 s; returns the last metrics.
template <class Pred>
std::string await_metrics(const server_process& s, Pred pred) {
  std::string m;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  do {
    m = metrics(s);
    if (pred(m)) return m;
    std::this_thread::sleep_for(20ms);  // polling an HTTP endpoint, not synchronising threads
  } while (std::chrono::steady_clock::now() < deadline);
  return m;
}

peer client_peer(server_process& s) {
  peer c{s.connect()};
  REQUIRE(c.conn.send(proto::client_hello{proto::request_head{1}, 1, "test-client"}));
  c.expect<proto::ok>();
  return c;
}

/// An endpoint inside the test: records each POST and answers when the test says so.
struct manual_endpoint {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<std::string> bodies;
  std::vector<std::string> signatures;
  std::vector<std::chrono::steady_clock::time_point> arrived;  ///< when each POST came
  unsigned answer = 0;                                         ///< 0: hold the request until set
  std::unique_ptr<app::http_server> srv;
  manual_endpoint() {
    std::string err;
    srv = app::http_server::start(
        "127.0.0.1", 0,
        [this](const app::http_exchange& ex) {
          std::unique_lock<std::mutex> lk{mtx};
          bodies.push_back(ex.body);
          arrived.push_back(std::chrono::steady_clock::now());
          auto sig = ex.headers.find("fusee-signature");
          signatures.push_back(sig == ex.headers.end() ? "" : sig->second);
          cv.notify_all();
          cv.wait_for(lk, 20s, [&] { return answer != 0; });
          return app::http_reply{answer ? answer : 504, "application/json", "{}"};
        },
        &err);
    REQUIRE_MESSAGE(srv, err);
  }
  ~manual_endpoint() {
    release(200);
    srv.reset();
  }
  std::string await_post(size_t n) {
    std::unique_lock<std::mutex> lk{mtx};
    REQUIRE(cv.wait_for(lk, 20s, [&] { return bodies.size() >= n; }));
    return bodies[n - 1];
  }
  void release(unsigned status) {
    std::lock_guard<std::mutex> lk{mtx};
    answer = status;
    cv.notify_all();
  }
};

}  // namespace

TEST_CASE("a call for an unheld shard triggers an invocation and is answered") {
  handler_process handler;
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(handler.port, secrets));
  REQUIRE(server.start().empty());
  auto c = client_peer(server);
  REQUIRE(c.conn.send(proto::call{proto::request_head{7, proto::shard_id{2}, proto::epoch_t{0}},
                                  "start", "", record("{}"), 10000}));
  auto res = c.expect<proto::call_result>(20s);
  CHECK(res.id == 7);
  CHECK(res.status == 0);
  CHECK(
      std::string(res.body.begin(), res.body.end()).rfind(R"({"handled":"start","shard":2,)", 0) ==
      0);
  // The endpoint's answer arrives after the call's: wait for the metrics to count it.
  auto m = await_metrics(server, [](const std::string& m) { return field(m, "succeeded") >= 1; });
  CHECK(field(m, "invocations") >= 1);
  CHECK(field(m, "succeeded") >= 1);
  CHECK(field(m, "failed") == 0);
  CHECK(field(m, "steps") >= 1);
  CHECK(m.find("\"url\":\"http://127.0.0.1:" + std::to_string(handler.port) + "/invoke\"") !=
        std::string::npos);
}

TEST_CASE("an endpoint answering 500 backs off and the metrics say so") {
  handler_process handler{{"--fail-status", "500"}};
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(handler.port, secrets));
  REQUIRE(server.start().empty());
  auto m =
      await_metrics(server, [](const std::string& m) { return field(m, "failuresInARow") >= 2; });
  CHECK(field(m, "failed") >= 2);
  CHECK(field(m, "failuresInARow") >= 2);
  CHECK(field(m, "succeeded") == 0);
  CHECK(m.find("answered HTTP 500") != std::string::npos);
  CHECK(m.find("configured to fail") != std::string::npos);  // where the endpoint says why
  CHECK(server.log().find("failed") != std::string::npos);   // logged with the endpoint
}

TEST_CASE("an invoked worker binds once, gets its shards and budget, and is fenced at the end") {
  manual_endpoint ep;
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data",
                        endpoint_toml(ep.srv->port(), secrets, "budget_ms = 60000\n"));
  REQUIRE(server.start().empty());
  auto body = ep.await_post(1);  // every shard is due once at start (`recovery`)
  auto req = proto::parse_invocation_request(body);
  REQUIRE(req);
  CHECK((req->reasons & proto::reason_recovery) != 0);
  CHECK(req->shards.size() == 4);
  CHECK(req->server == "127.0.0.1:" + std::to_string(server.port()));
  std::vector<std::string> secrets_list{"s3cret-s3cret-s3cret"};
  CHECK_FALSE(
      proto::verify(ep.signatures[0], body, secrets_list,
                    static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count())));

  peer w{server.connect()};
  proto::hello h;
  h.head.id = 1;
  h.offers = proto::offer_invoked | proto::offer_serve_calls;
  h.invocation = req->invocation;
  REQUIRE(w.conn.send(h));
  auto lease = w.expect<proto::lease>();
  CHECK(lease.grants.size() == 4);
  CHECK(lease.remaining_ms > 50000);
  CHECK(lease.remaining_ms <= 60000);

  peer again{server.connect()};  // a second connection for the same invocation
  REQUIRE(again.conn.send(h));
  CHECK(again.expect<proto::err>().code == uint16_t(proto::err_code::invocation_taken));
  peer unknown{server.connect()};
  h.invocation = proto::invocation_id{req->invocation.value() ^ 1};
  REQUIRE(unknown.conn.send(h));
  CHECK(unknown.expect<proto::err>().code == uint16_t(proto::err_code::unknown_invocation));

  pinger keep{w.conn, 200ms};
  auto e = lease.grants[0].epoch.value();
  auto s = lease.grants[0].shard.value();
  w.append(s, e, 1, {record("during")});
  REQUIRE(w.wait_durable(s, 1));
  ep.release(200);  // the endpoint answers; after close_grace_ms the leases are revoked
  auto revoked = w.expect<proto::revoked>(10s);
  CHECK(revoked.shards.size() == 4);
  w.append(s, e, 2, {record("late")}, 55);  // a worker that keeps appending is refused
  auto err = w.expect<proto::err>();
  CHECK(err.id == 55);
  CHECK(err.code == uint16_t(proto::err_code::stale_epoch));
  std::string m = metrics(server);
  CHECK(field(m, "succeeded") >= 1);
}

namespace {

/// The handler's stderr lines that announce invocations, once `n` of them were logged.
std::string handler_log(const handler_process& h, size_t n) {
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  do {
    std::ifstream in(h.dir.path() / "handler.log");
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    size_t count = 0;
    for (size_t p = text.find("invocation "); p != std::string::npos;
         p = text.find("invocation ", p + 1))
      ++count;
    if (count >= n) return text;
    std::this_thread::sleep_for(20ms);
  } while (std::chrono::steady_clock::now() < deadline);
  return text;
}

}  // namespace

TEST_CASE("an endpoint that hangs is counted timed out after budget + grace and fenced") {
  manual_endpoint ep;  // never answers until released
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(ep.srv->port(), secrets,
                                                           "budget_ms = 300\ngrace_ms = 200\n"));
  REQUIRE(server.start().empty());
  auto m = await_metrics(server, [](const std::string& m) { return field(m, "timedOut") >= 1; });
  auto seen = std::chrono::steady_clock::now();
  CHECK(field(m, "timedOut") >= 1);
  // Not before budget + grace from the POST (the server's clock starts as it sends it, a moment
  // before it arrives: 50 ms of slack). The start-up invocation may be sent before start()
  // returns, so the time from there says nothing.
  ep.await_post(1);
  std::lock_guard<std::mutex> lk{ep.mtx};
  CHECK(seen - ep.arrived[0] >= 450ms);
  CHECK(m.find("no answer within budget + grace (500 ms)") != std::string::npos);
}

TEST_CASE("an endpoint that refuses connections backs off, with the error in the metrics") {
  uint16_t dead_port;
  {
    manual_endpoint ep;  // take a free port, then close it
    dead_port = ep.srv->port();
  }
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(dead_port, secrets));
  REQUIRE(server.start().empty());
  auto m =
      await_metrics(server, [](const std::string& m) { return field(m, "failuresInARow") >= 2; });
  CHECK(field(m, "failed") >= 2);
  CHECK(field(m, "backoffShards") + field(m, "dueShards") + field(m, "invokingShards") == 4);
  CHECK(m.find("onnect") != std::string::npos);  // curl's "Couldn't connect to server"
}

TEST_CASE("a call for an endpoint deep in its backoff is sent as soon as the handler is back, not "
          "when the backoff ends") {
  uint16_t port = free_port();  // nothing listens there yet
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(port, secrets));
  REQUIRE(server.start().empty());
  // 8 failures in a row (about 13 s): the backoff is now 12.8 s ± 20 %.
  std::string m;
  auto deadline = std::chrono::steady_clock::now() + 40s;
  while (field(m = metrics(server), "failuresInARow") < 8 &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);  // polling an HTTP endpoint, not synchronising threads
  REQUIRE_MESSAGE(field(m, "failuresInARow") >= 8, m);
  handler_process handler({}, port);  // echo mode: answers every relayed call
  auto left = field(metrics(server), "backoffMs");
  REQUIRE_MESSAGE(left >= 5000, m);
  auto c = client_peer(server);
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(c.conn.send(proto::call{proto::request_head{9, proto::shard_id{1}, proto::epoch_t{0}},
                                  "start", "steps", record("{}"), 30000}));
  auto res = c.expect<proto::call_result>(30s);
  auto took = std::chrono::steady_clock::now() - t0;
  CHECK(res.status == 0);
  // The probe goes once nothing was sent or ended for a second; the backoff had 5 s or more.
  CHECK_MESSAGE(took < std::chrono::milliseconds(left - 2000),
                "took " << std::chrono::duration_cast<std::chrono::milliseconds>(took).count()
                        << " ms with " << left << " ms of backoff left");
  auto hlog = handler_log(handler, 1);
  CHECK_MESSAGE(hlog.find("shards [1] reasons [call") != std::string::npos, hlog);
}

TEST_CASE("a call that expires while parked because the endpoint fails says what the endpoint "
          "answered") {
  uint16_t port = free_port();  // nothing listens there
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(port, secrets));
  REQUIRE(server.start().empty());
  await_metrics(server, [](const std::string& m) { return field(m, "failuresInARow") >= 1; });
  auto c = client_peer(server);
  REQUIRE(c.conn.send(proto::call{proto::request_head{9, proto::shard_id{1}, proto::epoch_t{0}},
                                  "start", "steps", record("{}"), 1000}));
  auto res = c.expect<proto::call_result>(30s);
  CHECK(res.status == static_cast<uint8_t>(proto::call_status::parked_too_long));
  auto body = std::string(res.body.begin(), res.body.end());
  CHECK_MESSAGE(body.find("no holder took shard 1 while the call was parked (the invoker's "
                          "endpoint 0 (http://127.0.0.1:" +
                          std::to_string(port) + "/invoke): ") != std::string::npos,
                body);
  CHECK_MESSAGE(body.find("onnect") != std::string::npos, body);  // curl's words
  // The command line prints it with the code the HTTP API gives it.
  auto [rc, out] = run_process({fusee_binary(), "describe", "any", "--park-ms", "500", "--server",
                                "127.0.0.1:" + std::to_string(server.port())},
                               tmp.path() / "describe.out", 30s);
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("{\"code\":\"no_holder\",\"error\":\"no holder took shard ") !=
                    std::string::npos,
                out);
}

TEST_CASE("routing by types: a start goes to the endpoint that has its code") {
  handler_process typed;
  handler_process general;
  temp_dir secrets;
  temp_dir tmp;
  auto secret = (secrets.path() / "ep.secret").string();
  std::ofstream(secret) << "s3cret-s3cret-s3cret\n";
  auto toml = "[server]\nshards = 4\n[[endpoint]]\nurl = \"http://127.0.0.1:" +
              std::to_string(general.port) + "/invoke\"\nsecret_file = \"" + secret +
              "\"\n[[endpoint]]\nurl = \"http://127.0.0.1:" + std::to_string(typed.port) +
              "/invoke\"\ntypes = [\"payment\"]\nsecret_file = \"" + secret + "\"\n";
  server_process server(tmp.path() / "data", toml);
  REQUIRE(server.start().empty());
  // Let the start-up (`recovery`) invocation finish, so the shard is free again.
  await_metrics(server, [](const std::string& m) {
    return field(m, "succeeded") >= 1 && field(m, "inFlight") == 0;
  });
  auto c = client_peer(server);
  REQUIRE(c.conn.send(proto::call{proto::request_head{9, proto::shard_id{1}, proto::epoch_t{0}},
                                  "start", "payment", record("{}"), 10000}));
  auto res = c.expect<proto::call_result>(20s);
  CHECK(res.status == 0);
  auto log = handler_log(typed, 1);
  CHECK(log.find("reasons [call]") != std::string::npos);
}

TEST_CASE("a timer reported in IDLE wakes the shard again, and a handback continues") {
  SUBCASE("timer") {
    handler_process handler{{"--due-in-ms", "300"}};
    temp_dir secrets;
    temp_dir tmp;
    server_process server(tmp.path() / "data", endpoint_toml(handler.port, secrets));
    REQUIRE(server.start().empty());
    auto log = handler_log(handler, 2);
    CHECK(log.find("reasons [recovery]") != std::string::npos);
    CHECK(log.find("reasons [timer]") != std::string::npos);
  }
  SUBCASE("handback") {
    handler_process handler{{"--report-flags", "1"}};
    temp_dir secrets;
    temp_dir tmp;
    server_process server(tmp.path() / "data", endpoint_toml(handler.port, secrets));
    REQUIRE(server.start().empty());
    auto log = handler_log(handler, 2);
    CHECK(log.find("handback") != std::string::npos);
    auto m = metrics(server);
    CHECK(field(m, "handbacks") >= 1);
  }
}

TEST_CASE("max_shards splits the due shards into several invocations") {
  handler_process handler;
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data",
                        endpoint_toml(handler.port, secrets, "max_shards = 1\n"));
  REQUIRE(server.start().empty());
  auto m = await_metrics(server, [](const std::string& m) { return field(m, "succeeded") >= 4; });
  CHECK(field(m, "invocations") == 4);  // 4 shards due at start, one per invocation
  CHECK(field(m, "shards") == 4);
}

TEST_CASE("a budget spent without a step is no progress: backed off and logged") {
  handler_process handler{{"--report-flags", "3"}};  // BUSY | EXPIRED, and no calls: 0 steps
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(handler.port, secrets));
  REQUIRE(server.start().empty());
  // A shard counts as backing off once its invocation has ended too (until then it counts as
  // invoking), which may come after its no-progress report: await both.
  auto m = await_metrics(server, [](const std::string& m) {
    return field(m, "noProgress") >= 4 && field(m, "backoffShards") >= 1;
  });
  CHECK(field(m, "noProgress") >= 4);
  CHECK(field(m, "backoffShards") >= 1);
  CHECK(server.log().find("a step may take longer than the budget") != std::string::npos);
}

TEST_CASE("a lease that ends without a report counts a crash and backs the shard off") {
  manual_endpoint ep;
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(ep.srv->port(), secrets));
  REQUIRE(server.start().empty());
  auto req = proto::parse_invocation_request(ep.await_post(1));
  REQUIRE(req);
  {
    peer w{server.connect()};
    proto::hello h;
    h.head.id = 1;
    h.offers = proto::offer_invoked | proto::offer_serve_calls;
    h.invocation = req->invocation;
    REQUIRE(w.conn.send(h));
    CHECK(w.expect<proto::lease>().grants.size() == 4);
  }  // gone without DRAIN or IDLE
  auto m = await_metrics(server, [](const std::string& m) { return field(m, "crashes") >= 4; });
  CHECK(field(m, "crashes") >= 4);
  ep.release(200);
}

TEST_CASE("serving resumes when a failing endpoint recovers") {
  temp_dir secrets;
  temp_dir tmp;
  auto failing =
      std::make_unique<handler_process>(std::vector<std::string>{"--fail-status", "500"});
  uint16_t port = failing->port;
  server_process server(tmp.path() / "data", endpoint_toml(port, secrets));
  REQUIRE(server.start().empty());
  auto m =
      await_metrics(server, [](const std::string& m) { return field(m, "failuresInARow") >= 2; });
  REQUIRE(field(m, "failuresInARow") >= 2);
  failing.reset();  // the endpoint is fixed and comes back on the same address
  handler_process healthy{{}, port};
  m = await_metrics(server, [](const std::string& m) {
    return field(m, "succeeded") >= 1 && field(m, "failuresInARow") == 0;
  });
  CHECK(field(m, "succeeded") >= 1);
  CHECK(field(m, "failuresInARow") == 0);
  auto c = client_peer(server);
  REQUIRE(c.conn.send(proto::call{proto::request_head{3, proto::shard_id{0}, proto::epoch_t{0}},
                                  "ping", "", record("{}"), 10000}));
  CHECK(c.expect<proto::call_result>(20s).status == 0);
}

TEST_CASE("fusee call: a workflow id's call wakes the endpoint and prints the answer") {
  handler_process handler;
  temp_dir secrets;
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(handler.port, secrets));
  REQUIRE(server.start().empty());
  auto run = [&](const std::string& args) {
    std::string cmd = fusee_binary() + " call --server 127.0.0.1:" + std::to_string(server.port()) +
                      " " + args + " 2>&1";
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    char buf[512];
    while (p && std::fgets(buf, sizeof(buf), p))
      out += buf;
    int rc = p ? ::pclose(p) : -1;
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  auto [rc, out] = run("--workflow order-42 --method start --args '{\"item\":1}'");
  CHECK_MESSAGE(rc == 0, out << "\nserver log:\n" << server.log());
  // fnv1a64("order-42") mod 4 picks the shard; the handler names it in its answer.
  auto shard = proto::shard_for("order-42", 4).value();
  CHECK(out.find("\"handled\":\"start\",\"shard\":" + std::to_string(shard)) != std::string::npos);
  auto [bad, msg] = run("--shard 9 --method start");
  CHECK(bad == 2);
  CHECK(msg.find("no shard 9") != std::string::npos);
}

TEST_CASE("signing-key rotation: a handler listing the current and the previous secret accepts "
          "either, and a secret it no longer lists is refused with 401") {
  temp_dir keys;
  auto next = (keys.path() / "next.secret").string();
  auto retired = (keys.path() / "retired.secret").string();
  std::ofstream(next) << "n3xt-n3xt-n3xt-n3xt\n";
  std::ofstream(retired) << "r3tired-r3tired-r3tired\n";
  auto server_signing_with = [](const std::string& secret_file, uint16_t port) {
    return "[server]\nshards = 4\n[[endpoint]]\nurl = \"http://127.0.0.1:" + std::to_string(port) +
           "/invoke\"\nsecret_file = \"" + secret_file + "\"\n";
  };
  // Step 1 of a rotation: the handler lists the new secret beside the old one
  // ("s3cret-s3cret-s3cret").
  handler_process rotating({"--secret-file", next});
  for (auto* secret : {&next, &retired}) {
    // Step 2: the server signs with the new one: accepted. A secret the handler does not list
    // (retired in step 3): 401, and the invoker counts the failure.
    bool listed = secret == &next;
    temp_dir tmp;
    server_process server(tmp.path() / "data", server_signing_with(*secret, rotating.port));
    REQUIRE(server.start().empty());
    auto c = client_peer(server);
    REQUIRE(c.conn.send(proto::call{proto::request_head{7, proto::shard_id{1}, proto::epoch_t{0}},
                                    "start", "", record("{}"), listed ? 10000u : 1500u}));
    auto res = c.expect<proto::call_result>(20s);
    CHECK(res.status == (listed ? 0 : 2));  // unlisted: never bound, parked too long
    auto m = await_metrics(server, [&](const std::string& m) {
      return field(m, listed ? "succeeded" : "failed") >= 1;
    });
    CHECK(field(m, "succeeded") >= (listed ? 1 : 0));
    if (!listed) {
      CHECK(field(m, "succeeded") == 0);
      CHECK_MESSAGE(m.find("401") != std::string::npos, m);
    }
  }
  CHECK_MESSAGE(rotating.log().find("refused a POST: 401") != std::string::npos, rotating.log());
  CHECK(rotating.log().find("r3tired") == std::string::npos);  // no secret in the handler's log
  CHECK(rotating.log().find("n3xt") == std::string::npos);
}

TEST_CASE("fusee handler reads invocation bodies up to 32 MiB (a million-shard invocation's) and "
          "refuses a larger one with 413 body_too_large") {
  handler_process h;
  // Over 1 MiB, the limit it had: read whole (its header is well formed and fresh), then
  // refused for its digest (401).
  std::vector<std::string> forged{"fusee-signature: t=" + std::to_string(proto::unix_ms()) +
                                  ",v1=" + std::string(64, '0')};
  std::string big(2u << 20, ' ');
  auto [status, body] = http_request("POST", h.port, "/invoke", big, 30000, forged);
  CHECK_MESSAGE(status == 401, body);
  CHECK_MESSAGE(body.find("does not match") != std::string::npos, body);
  std::string over(proto::max_invocation_body + 1, ' ');
  auto [too_large, refusal] = http_request("POST", h.port, "/invoke", over, 30000, forged);
  CHECK(too_large == 413);
  CHECK_MESSAGE(refusal.find("\"code\":\"body_too_large\"") != std::string::npos, refusal);
}

TEST_CASE("fusee handler refuses a POST whose signature header no body can make good before "
          "reading its body: none, malformed, or out of the clock's tolerance") {
  handler_process h;
  auto old = std::to_string(proto::unix_ms() - 600000);  // 10 minutes ago; the tolerance is 5
  for (std::string header :
       {std::string{}, std::string{"fusee-signature: garbage\r\n"},
        "fusee-signature: t=" + old + ",v1=" + std::string(64, '0') + "\r\n"}) {
    CAPTURE(header);
    // A body announced and never sent: the answer comes anyway.
    raw_socket s(h.port, "POST /invoke HTTP/1.1\r\nHost: x\r\n" + header +
                             "Content-Length: 1000000\r\n\r\n");
    auto out = s.http_answer(10s);
    CHECK_MESSAGE(out.rfind("HTTP/1.1 401", 0) == 0, out);
  }
  CHECK_MESSAGE(h.log().find("refused a POST before its body: 401 signature is") !=
                    std::string::npos,
                h.log());
}
