// Introspection end to end: the admin server's JSON views, `fusee inspect` over the middleman and
// /metrics (checked by Prometheus' own promtool) against a real server in a known state.
#include <algorithm>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "raw_socket.hpp"
#include "server_process.hpp"
#include "worker.hpp"

using namespace fusee;
using namespace fusee::test;
using json = nlohmann::json;

namespace {

json get_json(uint16_t port, const std::string& path) {
  auto [status, body] = http_get(port, path);
  INFO(path << " answered " << status << ": " << body);
  REQUIRE(status == 200);
  return json::parse(body);
}

/// `fusee inspect --json` against the server, with `args`.
json inspect(const server_process& s, const temp_dir& tmp, std::vector<std::string> args) {
  std::vector<std::string> cmd{fusee_binary(), "inspect", "--json", "--node",
                               "127.0.0.1:" + std::to_string(s.inspect_port())};
  cmd.insert(cmd.end(), args.begin(), args.end());
  auto [rc, out] = run_process(cmd, tmp.path() / "inspect.out", 30s);
  INFO("fusee inspect printed: " << out);
  REQUIRE(rc == 0);
  return json::parse(out);
}

/// Polls `path` until `pred` holds (at most 15 s): the server's state moves by itself.
template <class Pred>
json await_json(uint16_t port, const std::string& path, Pred pred) {
  json j;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  do {
    j = get_json(port, path);
    if (pred(j)) return j;
    std::this_thread::sleep_for(20ms);  // polling an HTTP view, not synchronising threads
  } while (std::chrono::steady_clock::now() < deadline);
  FAIL("condition on " << path << " never held; last: " << j.dump());
  return j;
}

const json* row_of(const json& reply, const std::string& kind, uint64_t id) {
  for (auto& r : reply["rows"])
    if (r["kind"] == kind && r["id"] == id) return &r;
  return nullptr;
}

/// A sample's value in Prometheus text: `name{labels} value` (labels as written, or none).
double sample(const std::string& text, const std::string& series) {
  auto i = text.find("\n" + series + " ");
  if (i == std::string::npos) return -1;
  return std::stod(text.substr(i + series.size() + 2));
}

void promtool_check(const std::string& text, const temp_dir& tmp) {
  auto file = tmp.path() / "metrics.txt";
  std::ofstream(file) << text;
  auto [rc, out] =
      run_process({"/bin/sh", "-c",
                   "command -v promtool >/dev/null || { echo 'promtool is not installed "
                   "(Debian package prometheus; make deps)'; exit 3; }; promtool check "
                   "metrics < '" +
                       file.string() + "'"},
                  tmp.path() / "promtool.out", 30s);
  INFO("promtool: " << out);
  CHECK(rc == 0);
}

std::string endpoint_toml(const temp_dir& tmp) {
  auto secret = (tmp.path() / "ep.secret").string();
  std::ofstream(secret) << "s3cret-s3cret-s3cret\n";
  // Port 1 refuses connections: the endpoint fails and backs off.
  return "[server]\nshards = 4\n[[endpoint]]\nurl = \"http://127.0.0.1:1/invoke\"\n"
         "secret_file = \"" +
         secret + "\"\n";
}

}  // namespace

TEST_CASE("the JSON views and fusee inspect agree on a held shard, a backing-off endpoint and a "
          "parked call") {
  temp_dir tmp;
  server_process server(tmp.path() / "data", endpoint_toml(tmp), {"--log-level", "debug"});
  REQUIRE(server.start().empty());
  auto admin = server.admin_port();

  peer w{server.connect()};
  auto lease = w.hello(proto::offer_serve_calls, 1, "inspected-worker");
  REQUIRE(lease.grants.size() == 1);
  auto held = lease.grants[0].shard.value();
  auto epoch = lease.grants[0].epoch.value();
  pinger keep(w.conn, 200ms);
  uint32_t parked_shard = (held + 1) % 4;
  peer c{server.connect()};
  REQUIRE(c.conn.send(proto::client_hello{proto::request_head{1}, 1, "inspecting-client"}));
  c.expect<proto::ok>();
  REQUIRE(c.conn.send(
      proto::call{proto::request_head{7, proto::shard_id{parked_shard}, proto::epoch_t{0}},
                  "describe", "", proto::bytes{'{', '}'}, 60000}));

  // The endpoint fails (nothing listens on port 1) until its backoff is seconds long.
  await_json(admin, "/v1/endpoints", [](const json& j) {
    return j["rows"].size() == 1 && j["rows"][0]["failuresInARow"].get<int>() >= 5;
  });
  auto shard_path = "/v1/shards/" + std::to_string(parked_shard);
  auto parked =
      await_json(admin, shard_path, [](const json& j) { return j["parkedCalls"].get<int>() == 1; });

  // The held shard, by both roads.
  auto h = get_json(admin, "/v1/shards/" + std::to_string(held));
  CHECK(h["state"] == "held");
  CHECK(h["epoch"] == epoch);
  CHECK(h["holder"].get<uint64_t>() != 0);
  auto shards = inspect(server, tmp, {"--kind", "shard"});
  CHECK(shards["matched"] == 4);
  auto* hi = row_of(shards, "shard", held);
  REQUIRE(hi != nullptr);
  CHECK((*hi)["state"] == "held");
  CHECK((*hi)["holder"] == h["holder"]);
  CHECK((*hi)["epoch"] == h["epoch"]);
  auto* pi = row_of(shards, "shard", parked_shard);
  REQUIRE(pi != nullptr);
  CHECK((*pi)["parkedCalls"] == 1);
  CHECK(parked["parkedCalls"] == 1);
  CHECK(shards["states"]["held"] == 1);
  // The grid in the table too, the held shard an H (the JSON carries it as "grid").
  {
    auto [rc, out] = run_process({fusee_binary(), "inspect", "--node",
                                  "127.0.0.1:" + std::to_string(server.inspect_port()), "--kind",
                                  "shard", "--grid", "1"},
                                 tmp.path() / "grid.out", 30s);
    INFO(out);
    CHECK(rc == 0);
    auto at = out.find(
        "grid (H held, X blocked, I invoking, B backoff, D due, W waiting, . idle, - another "
        "node's):\n0 ");
    REQUIRE(at != std::string::npos);
    auto cells = out.substr(out.find('\n', at) + 1 + 10, 4);
    CHECK(cells[held] == 'H');
    CHECK(std::count(cells.begin(), cells.end(), 'H') == 1);
  }

  // The endpoint: the same failure, backing off (read around the CLI's answer: the backoff is
  // seconds long, the reads milliseconds apart).
  auto before = get_json(admin, "/v1/endpoints")["rows"][0];
  auto eps = inspect(server, tmp, {"--kind", "endpoint"});
  auto after = get_json(admin, "/v1/endpoints")["rows"][0];
  REQUIRE(eps["rows"].size() == 1);
  auto e = eps["rows"][0];
  CHECK(e["url"] == "http://127.0.0.1:1/invoke");
  // (A jittered backoff may retry between the reads: then the CLI saw the later failure, whose
  // message names its own connect time.)
  CHECK((e["lastError"] == before["lastError"] || e["lastError"] == after["lastError"]));
  CHECK(e["lastError"].get<std::string>().find("Couldn't connect") != std::string::npos);
  CHECK((e["state"] == before["state"] || e["state"] == after["state"]));
  CHECK(e["failed"].get<int>() >= before["failed"].get<int>());
  CHECK(e["failed"].get<int>() <= after["failed"].get<int>());
  CHECK(after["state"] == "backoff");

  // The worker's session, with the shard it holds; the state filter reaches the same rows.
  auto sessions = get_json(admin, "/v1/sessions?state=worker");
  REQUIRE(sessions["rows"].size() == 1);
  CHECK(sessions["rows"][0]["name"] == "inspected-worker");
  CHECK(sessions["rows"][0]["shardsHeld"] == 1);
  CHECK(sessions["rows"][0]["id"] == h["holder"]);
  auto cli_sessions = inspect(server, tmp, {"--kind", "session", "--state", "worker"});
  REQUIRE(cli_sessions["rows"].size() == 1);
  CHECK(cli_sessions["rows"][0]["id"] == h["holder"]);
  auto backing = inspect(server, tmp, {"--state", "held"});
  CHECK(backing["matched"] == 1);

  // The log and readiness.
  auto log = get_json(admin, "/v1/log");
  CHECK(log["kind"] == "log");
  CHECK(log["state"] == "ok");
  CHECK(log["fsyncs"].get<int>() >= 1);  // the grant
  CHECK(http_get(admin, "/readyz").first == 200);

  // The endpoint's secret appears nowhere: not in any view, the metrics, the problems, the
  // CLI's answer or the server's log (at debug level).
  std::string everything = server.log() + inspect(server, tmp, {"--every", "1"}).dump();
  for (auto path : {"/metrics", "/v1/actors?every=1&limit=5000", "/v1/overview", "/v1/problems",
                    "/v1/invoker", "/v1/log", "/"})
    everything += http_get(admin, path).second;
  CHECK(everything.find("invocation sent") != std::string::npos);  // the debug lines are there
  CHECK(everything.find("s3cret") == std::string::npos);
}

TEST_CASE("/metrics passes promtool and its counters move as a workload runs") {
  server_fixture f;  // 4 shards
  auto& server = f.server;
  auto& tmp = f.tmp;
  auto admin = server.admin_port();
  auto [status, first] = http_get(admin, "/metrics");
  REQUIRE(status == 200);
  promtool_check(first, tmp);
  CHECK(sample(first, "fusee_log_records_total") == 0);
  CHECK(sample(first, "fusee_sessions{role=\"worker\"}") == 0);

  peer w{server.connect()};
  auto lease = w.hello(proto::offer_serve_calls, 0, "metrics-worker");
  REQUIRE(lease.grants.size() == 4);
  auto shard = lease.grants[0].shard.value();
  w.append(shard, lease.grants[0].epoch.value(), 1,
           std::vector<proto::bytes>(10, proto::bytes{'x'}));
  REQUIRE(w.wait_durable(shard, 10));

  // Scrapes are gathered at most once a second: poll until the workload shows.
  std::string now;
  auto deadline = std::chrono::steady_clock::now() + 15s;
  do {
    now = http_get(admin, "/metrics").second;
    if (sample(now, "fusee_log_records_total") >= 10) break;
    std::this_thread::sleep_for(50ms);  // polling an HTTP view
  } while (std::chrono::steady_clock::now() < deadline);
  promtool_check(now, tmp);
  CHECK(sample(now, "fusee_log_records_total") == 10);
  CHECK(sample(now, "fusee_log_appends_total") == 1);
  CHECK(sample(now, "fusee_leases_granted_total") == 4);
  CHECK(sample(now, "fusee_sessions{role=\"worker\"}") == 1);
  CHECK(sample(now, "fusee_shards_by_state{state=\"held\"}") == 4);
  CHECK(sample(now, "fusee_log_fsync_seconds_count") >= 2);  // the grants' batch and the append's
  CHECK(sample(now, "fusee_log_batch_records_sum") == 10);
  CHECK(sample(now, "fusee_log_roll_seconds_count") == 0);  // no roll in 10 small records
  CHECK(sample(now, "fusee_log_spare_failures_total") == 0);
  CHECK(sample(now, "fusee_actors{kind=\"session\"}") == 1);
}

TEST_CASE("bad introspection requests get clear errors: admin server and fusee inspect") {
  server_fixture f;  // 4 shards
  auto& server = f.server;
  auto& tmp = f.tmp;
  auto admin = server.admin_port();
  auto [s1, b1] = http_get(admin, "/v1/actors?kind=shards");
  CHECK(s1 == 400);
  CHECK(b1.find("unknown kind \\\"shards\\\"") != std::string::npos);
  auto [s0, b0] = http_get(admin, "/v1/shards/4");
  CHECK(s0 == 404);
  CHECK(b0.find("no shard 4 on this node (it has 4)") != std::string::npos);
  CHECK(http_get(admin, "/v1/shards/two").first == 400);
  auto [s5, b5] = http_get(admin, "/v1/endpoints?kind=shard");
  CHECK(s5 == 400);
  CHECK(b5.find("lists endpoint actors only; use /v1/actors?kind=shard") != std::string::npos);
  auto [s6, b6] = http_get(admin, "/v1/shards?kind=wombat");  // no route to send it to
  CHECK(s6 == 400);
  CHECK(b6.find("unknown kind \\\"wombat\\\"") != std::string::npos);
  CHECK(http_request("POST", admin, "/metrics").first == 405);
  CHECK(http_request("HEAD", admin, "/metrics").first == 200);
  auto [s2, b2] = http_get(admin, "/v1/shards?limit=9999");
  CHECK(s2 == 400);
  CHECK(b2.find("page with offset") != std::string::npos);
  // A shard the node does not have is 404 in every form; a range's end is cut to the shards.
  auto [s3, b3] = http_get(admin, "/v1/shards?shard=4");
  CHECK(s3 == 404);
  CHECK(b3.find("no shard 4 on this node (it has 4)") != std::string::npos);
  CHECK(http_get(admin, "/v1/actors?shard=9-12").first == 404);
  CHECK(http_get(admin, "/v1/shards?shard=2-99").first == 200);
  // A parameter given twice, or to a view that takes none, is refused, not ignored.
  auto [s4, b4] = http_get(admin, "/v1/actors?kind=shard&kind=log");
  CHECK(s4 == 400);
  CHECK(b4.find("query parameter \\\"kind\\\" is given twice") != std::string::npos);
  for (auto path : {"/v1/overview?x=1", "/v1/problems?limit=1", "/v1/log?x=1", "/v1/invoker?x=1",
                    "/v1/shards/1?x=1"}) {
    auto [s, b] = http_get(admin, path);
    CHECK_MESSAGE(s == 400, path);
    CHECK_MESSAGE(b.find("takes no query parameters") != std::string::npos, b);
  }
  // Probes, the page and /metrics take any (a scrape job's `params`, a cache-buster).
  CHECK(http_get(admin, "/healthz?probe=1").first == 200);
  CHECK(http_get(admin, "/metrics?x=1&x=2").first == 200);

  auto [rc, out] = run_process({fusee_binary(), "inspect", "--node", "127.0.0.1:1"},
                               tmp.path() / "unreachable.out", 30s);
  CHECK(rc == 1);
  CHECK(out.find("cannot reach the inspector at 127.0.0.1:1") != std::string::npos);
  {  // A port that takes the connection (the kernel's backlog) and answers nothing.
    test::loopback_listener mute;
    auto [rc, out] = run_process({fusee_binary(), "inspect", "--node",
                                  "127.0.0.1:" + std::to_string(mute.port), "--deadline-ms", "100"},
                                 tmp.path() / "mute.out", 30s);
    CHECK(rc == 1);
    CHECK_MESSAGE(out.find("no handshake within 5100 ms") != std::string::npos, out);
  }
  auto [rc4, out4] =
      run_process({fusee_binary(), "inspect", "--node",
                   "127.0.0.1:" + std::to_string(server.inspect_port()), "--shard", "4"},
                  tmp.path() / "no-shard.out", 30s);
  CHECK(rc4 == 1);  // as /v1/shards/4's 404 above
  CHECK_MESSAGE(out4.find("no shard 4 on this node (it has 4)") != std::string::npos, out4);
  auto [rc2, out2] =
      run_process({fusee_binary(), "inspect", "--kind", "wombat"}, tmp.path() / "bad.out", 30s);
  CHECK(rc2 == 2);
  CHECK(out2.find("unknown kind \"wombat\"") != std::string::npos);
  // The table: a footer saying what it showed.
  auto [rc3, out3] = run_process(
      {fusee_binary(), "inspect", "--node", "127.0.0.1:" + std::to_string(server.inspect_port())},
      tmp.path() / "table.out", 30s);
  CHECK(rc3 == 0);
  CHECK(out3.find("showing 7 of 7 from 0") != std::string::npos);  // directory, log, gateway, 4
}
