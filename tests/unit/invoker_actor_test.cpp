// The invoker's actors under CAF's deterministic test scheduler with simulated time: nothing runs
// unless the test drives it, and timers fire when the test advances the clock.
#include <doctest/doctest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "actors/http_client.hpp"
#include "actors/invoker.hpp"
#include "actors/invoker_rules.hpp"
#include "actors/wake_records.hpp"
#include "deterministic_config.hpp"
#include "logging/logging.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/messages.hpp"
#include "protocol/signature.hpp"

using namespace fusee;
using namespace fusee::server;
using namespace std::chrono_literals;

namespace {

using test_config = fusee::test::deterministic_config;

/// Records the POSTs instead of sending them.
struct fake_sender : http_sender {
  std::vector<http_request> requests;
  void submit(http_request req) override { requests.push_back(std::move(req)); }
};

/// Stands in for the directory: records which sessions were fenced.
struct fenced_log {
  std::vector<uint64_t> sessions;
  std::vector<bool> overran;         ///< fence_request::overran, by session's position
  std::vector<std::string> trouble;  ///< endpoint_trouble texts, in order
};

fence_actor::behavior_type directory_stub(fence_actor::pointer, fenced_log* log) {
  return {[=](const fence_request& f) {
            log->sessions.push_back(f.session);
            log->overran.push_back(f.overran);
          },
          [=](const endpoint_trouble& t) { log->trouble.push_back(t.text); }};
}

/// Plays the directory's part in binding an invoked worker: asks the scheduler (the endpoint
/// that owns the invocation answers), and when bound and `lease`, tells that endpoint the worker
/// leased its shards. The answer lands in `*out` if given.
caf::behavior binder(caf::event_based_actor* self, scheduler_actor scheduler, uint64_t id,
                     uint64_t session, bool lease, bind_result* out) {
  self->request(scheduler, caf::infinite, bind_request{id, session}).then([=](bind_result& r) {
    if (lease && r.code == bind_code::bound) self->send(r.endpoint, invocation_leased{id, 1});
    if (out) *out = r;
    self->quit();
  });
  return {[](caf::ok_atom) {}};
}

/// Asks the scheduler for its stats; the answer lands in `*out`.
caf::behavior stats_asker(caf::event_based_actor* self, scheduler_actor scheduler,
                          actor_stats* out) {
  self->request(scheduler, caf::infinite, stats_atom::value).then([=](actor_stats& a) {
    *out = std::move(a);
    self->quit();
  });
  return {[](caf::ok_atom) {}};
}

std::vector<uint32_t> sorted(std::vector<uint32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

endpoint_settings endpoint(std::string url, std::vector<std::string> types,
                           uint32_t concurrency = 16, uint32_t max_shards = 0) {
  endpoint_settings e;
  e.url = std::move(url);
  e.types = std::move(types);
  e.secret = "k";
  e.concurrency = concurrency;
  e.budget_ms = 1000;
  e.max_shards = max_shards;
  e.grace_ms = 500;
  return e;
}

node_settings settings(uint32_t shards, std::vector<endpoint_settings> endpoints,
                       uint32_t close_grace_ms = 300) {
  node_settings s;
  s.shards = shards;
  s.close_grace_ms = close_grace_ms;
  s.endpoints = std::move(endpoints);
  return s;
}

node_settings one_endpoint(uint32_t close_grace_ms) {
  return settings(4, {endpoint("http://ep/invoke", {})}, close_grace_ms);
}

struct fixture {
  test_config cfg;
  caf::actor_system sys{cfg};
  caf::scheduler::test_coordinator& sched =
      dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  fake_sender http;
  fenced_log fenced;
  fence_actor directory = sys.spawn(directory_stub, &fenced);
  invoker_handles inv;
  scheduler_actor scheduler;

  explicit fixture(uint32_t close_grace_ms = 300) : fixture(one_endpoint(close_grace_ms)) {}
  explicit fixture(node_settings settings) : fixture(settings, not_started{}) {
    start({});
    advance(rules::gather_window);  // every shard is due at start, for recovery
  }
  /// The invoker before the directory told the scheduler that dispatching may start.
  struct not_started {};
  fixture(node_settings settings, not_started) {
    for (auto& e : settings.endpoints)
      urls.push_back(e.url);
    inv = spawn_invoker(sys, settings, "127.0.0.1:7400", &http, directory);
    scheduler = inv.scheduler;
    sched.run();
  }
  /// As the directory does once it knows the invoker: `held`, the shards held already.
  void start(std::vector<uint32_t> held) {
    caf::anon_send(scheduler, caf::put_atom::value, std::move(held));
    sched.run();
  }
  ~fixture() {
    caf::anon_send_exit(scheduler, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
    sched.run();
  }
  void due(uint32_t shard, uint8_t reasons, std::string start_type = {}) {
    caf::anon_send(inv.records->get(shard), due_atom::value, reasons, std::move(start_type));
    sched.run();
  }
  void undue(uint32_t shard, uint8_t reasons) {
    caf::anon_send(inv.records->get(shard), undue_atom::value, reasons);
    sched.run();
  }
  void leased(uint32_t shard, int32_t endpoint = -1) {
    caf::anon_send(inv.records->get(shard), leased_atom::value, endpoint);
    sched.run();
  }
  void lease_ended(uint32_t shard, lease_end e) {
    caf::anon_send(inv.records->get(shard), std::move(e));
    sched.run();
  }
  proto::invocation_request body(size_t i) {
    auto r = proto::parse_invocation_request(http.requests.at(i).body);
    REQUIRE(r);
    return *r;
  }
  std::vector<uint32_t> shards_of(size_t i) {
    std::vector<uint32_t> out;
    for (auto s : body(i).shards)
      out.push_back(s.value());
    return out;
  }
  uint64_t last_id() { return body(http.requests.size() - 1).invocation.value(); }
  /// The POST of invocation `id`.
  http_request& request_of(uint64_t id) {
    auto req = std::find_if(http.requests.begin(), http.requests.end(), [&](auto& r) {
      return proto::parse_invocation_request(r.body)->invocation.value() == id;
    });
    REQUIRE(req != http.requests.end());
    return *req;
  }
  /// The curl thread reports the POST of invocation `id` (through the request's callback).
  void answer(uint64_t id, int64_t status, bool timed_out = false) {
    request_of(id).done(
        http_result{id, status, status ? "" : "Couldn't connect to server", timed_out, {}, 10.0});
    sched.run();
  }
  /// The curl thread reports that the POST of invocation `id` was never sent, after `waited_ms`.
  void not_sent(uint64_t id, std::string why, double waited_ms) {
    http_result res;
    res.id = id;
    res.error = std::move(why);
    res.total_ms = waited_ms;
    res.sent = false;
    request_of(id).done(std::move(res));
    sched.run();
  }
  /// /v1/invoker's body, as the scheduler gives it.
  std::string invoker_json() {
    auto out = std::make_shared<std::string>();
    sys.spawn(
        [s = scheduler](caf::event_based_actor* self, std::shared_ptr<std::string> into) {
          self->request(s, caf::infinite, metrics_atom::value, uint64_t{0})
              .then([=](std::string& j) { *into = std::move(j); });
        },
        out);
    sched.run();
    return *out;
  }
  /// An invoked worker on `session` binds to invocation `id` (and, if `lease`, leases).
  bind_result bind(uint64_t id, uint64_t session, bool lease = false) {
    bind_result r;
    sys.spawn(binder, scheduler, id, session, lease, &r);
    sched.run();
    return r;
  }
  /// The invoked worker binds and takes every shard of invocation `id`, then the POST returns 200.
  void served(uint64_t id, uint64_t session) {
    bind(id, session, true);
    for (size_t i = 0; i < http.requests.size(); ++i)
      if (body(i).invocation.value() == id)
        for (auto s : body(i).shards)
          caf::anon_send(inv.records->get(s.value()), leased_atom::value,
                         endpoint_index(http.requests[i].url));
    sched.run();
    answer(id, 200);
  }
  /// The entries of the endpoints' ready queues, stale ones included (the scheduler's stats).
  double ready_entries() {
    actor_stats a;
    sys.spawn(stats_asker, scheduler, &a);
    sched.run();
    return a.find("readyQueueEntries") ? a.find("readyQueueEntries")->number : -1;
  }
  /// The scheduler's counts of shards by state, as its stats say: idle is what is left.
  std::map<std::string, double> counts() {
    actor_stats a;
    sys.spawn(stats_asker, scheduler, &a);
    sched.run();
    std::map<std::string, double> out;
    for (auto k : {"dueShards", "waitingShards", "backoffShards", "invokingShards"})
      out[k] = a.find(k) ? a.find(k)->number : -1;
    return out;
  }
  void advance(caf::timespan d) {
    sched.advance_time(d);
    sched.run();
  }
  /// Serves the start-up invocation: a worker takes every shard, the POST returns 200, and every
  /// lease ends with an IDLE report of nothing due. Afterwards no shard is due.
  /// The one POST that shard `shard` being due for `reasons` makes goes to `url` (after the gather
  /// window, unless a call or message woke it); its worker is then served.
  void expect_post(uint32_t shard, uint8_t reasons, const std::string& url) {
    if (!(reasons & (proto::reason_call | proto::reason_message))) {
      CHECK(http.requests.empty());  // waits for others to group with: the gather window
      advance(rules::gather_window);
    }
    REQUIRE(http.requests.size() == 1);
    CHECK(http.requests[0].url == url);
    CHECK(shards_of(0) == std::vector<uint32_t>{shard});
    CHECK(body(0).reasons == reasons);
    served(last_id(), 7);
    http.requests.clear();
  }
  void settle() {
    REQUIRE(!http.requests.empty());
    for (size_t i = 0; i < http.requests.size(); ++i)
      served(body(i).invocation.value(), 100 + i);
    advance(1s);  // close grace: the workers are fenced
    for (uint32_t s = 0; s < inv.records->size(); ++s) {
      lease_end idle;
      idle.invoked = true;
      lease_ended(s, idle);
    }
    http.requests.clear();
  }
  std::vector<std::string> urls;  ///< by endpoint index
  int32_t endpoint_index(const std::string& url) {
    auto i = std::find(urls.begin(), urls.end(), url);
    return i == urls.end() ? 0 : static_cast<int32_t>(i - urls.begin());
  }
};

}  // namespace

TEST_CASE("due shards become one signed POST with budget + grace as its deadline") {
  fixture f;  // every shard is due once at start
  REQUIRE(f.http.requests.size() == 1);
  auto& req = f.http.requests[0];
  CHECK(req.url == "http://ep/invoke");
  CHECK(req.timeout_ms == 1500);     // budget 1000 + grace 500: then curl reports a time-out
  CHECK(req.send_within_ms == 900);  // begun later, the worker would have under 100 ms to work
  auto body = proto::parse_invocation_request(req.body);
  REQUIRE(body);
  CHECK(body->shards.size() == 4);
  CHECK(body->budget_ms == 1000);
  CHECK(body->reasons == proto::reason_recovery);
  CHECK(body->server == "127.0.0.1:7400");
  bool signed_ok = false;
  for (auto& h : req.headers)
    if (h.rfind("fusee-signature: ", 0) == 0) {
      std::vector<std::string> secrets{"k"};
      auto t = std::stoull(h.substr(std::string("fusee-signature: t=").size()));
      signed_ok = !proto::verify(h.substr(17), req.body, secrets, t);
    }
  CHECK(signed_ok);
}

TEST_CASE("nothing is dispatched before the directory tells the scheduler it knows the invoker") {
  // So no POST can name an invocation before the directory knows the invoker and can bind it.
  fixture f{one_endpoint(300), fixture::not_started{}};
  f.advance(1s);
  CHECK(f.http.requests.empty());
  f.start({});
  f.advance(rules::gather_window);
  CHECK(f.http.requests.size() == 1);
}

TEST_CASE("shards held when dispatching may start are not invoked for, before their records "
          "report it too") {
  fixture f{one_endpoint(300), fixture::not_started{}};
  f.start({0, 2});
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.shards_of(0) == std::vector<uint32_t>{1, 3});
}

TEST_CASE("a bind is answered by the endpoint that owns the invocation, once") {
  fixture f{settings(4, {endpoint("http://a/invoke", {"x"}), endpoint("http://b/invoke", {})})};
  REQUIRE(f.http.requests.size() == 1);  // at start: b, the endpoint with no types
  auto id = f.last_id();
  auto first = f.bind(id, 42);
  CHECK(first.code == bind_code::bound);
  CHECK(first.shards == std::vector<uint32_t>{0, 1, 2, 3});
  CHECK(first.endpoint_index == 1);
  CHECK(first.endpoint);  // the directory tells it of the lease and the reports directly
  CHECK(first.remaining_ms == 1000);  // no simulated time has passed: the whole budget
  CHECK(f.bind(id, 43).code == bind_code::taken);
  CHECK(f.bind(id + 1, 44).code == bind_code::unknown);
  f.answer(id, 500);
  CHECK(f.bind(id, 45).code == bind_code::unknown);  // over
}

TEST_CASE("after a 2xx the bound worker is fenced exactly close_grace_ms later") {
  fixture f{300};
  auto id = f.last_id();
  f.bind(id, 42, true);
  f.answer(id, 200);
  CHECK(f.fenced.sessions.empty());
  f.advance(299ms);
  CHECK(f.fenced.sessions.empty());
  f.advance(1ms);
  REQUIRE(f.fenced.sessions.size() == 1);
  CHECK(f.fenced.sessions[0] == 42);
}

TEST_CASE("a failed or timed-out invocation is fenced at once and the endpoint backs off") {
  fixture f;
  auto id = f.last_id();
  f.bind(id, 7);
  f.answer(id, 0, true);  // curl: no answer within budget + grace
  REQUIRE(f.fenced.sessions.size() == 1);
  CHECK(f.fenced.sessions[0] == 7);
  CHECK_FALSE(f.fenced.overran[0]);  // it never leased: not a step's length
  // The shards are still due; the endpoint's first backoff is 100 ms ± 20 %.
  CHECK(f.http.requests.size() == 1);
  f.advance(79ms);
  CHECK(f.http.requests.size() == 1);
  f.advance(42ms);  // 121 ms: past the longest jittered backoff
  CHECK(f.http.requests.size() == 2);
  // A second failure doubles it: 200 ms ± 20 %.
  f.answer(f.last_id(), 500);
  f.advance(159ms);
  CHECK(f.http.requests.size() == 2);
  f.advance(82ms);
  CHECK(f.http.requests.size() == 3);
}

TEST_CASE("a worker that leased its shards and did not answer in time is fenced and counted "
          "timed out as a step longer than the budget, and ends its endpoint's backoff") {
  fixture f;
  f.answer(f.last_id(), 500);  // a failure first: the endpoint backs off 100 ms ± 20 %
  f.advance(121ms);
  REQUIRE(f.http.requests.size() == 2);
  auto id = f.last_id();
  f.bind(id, 7, true);
  f.answer(id, 0, true);  // curl: no answer within budget + grace, after the lease
  REQUIRE(f.fenced.sessions.size() == 1);
  CHECK(f.fenced.sessions[0] == 7);
  CHECK(f.fenced.overran[0]);  // its shards' lease ends say so (lease_end::overran)
  auto j = f.invoker_json();
  CHECK(j.find("\"failed\":1,\"timedOut\":1") != std::string::npos);
  CHECK(j.find("\"failuresInARow\":0,\"backoffMs\":0") != std::string::npos);
  CHECK_MESSAGE(j.find("\"lastError\":\"its worker leased the shards and did not answer within "
                       "budget + grace (1500 ms): a step may take longer than the budget "
                       "(budget_ms 1000)\",\"lastErrorAtMs\":") != std::string::npos,
                j);
  // The shards (still due: the stub tells them of no lease) are sent again at once: their own
  // crash backoff applies once a lease ends, the endpoint's does not.
  CHECK(f.http.requests.size() == 3);
}

TEST_CASE("while its endpoint backs off, shards calls wait for are sent as one probe at a time, at "
          "most once a second, and the other due shards wait for the backoff's end") {
  fixture f;                      // 4 shards, one endpoint: the start-up POST carries them all
  for (int i = 0; i < 10; ++i) {  // 10 failures in a row: 100 ms doubling to the 30-s cap
    f.answer(f.last_id(), 500);
    if (i < 9) f.advance(40s);
  }
  REQUIRE(f.http.requests.size() == 10);
  f.advance(20s);  // (the backoff is at least 24 s)
  CHECK(f.http.requests.size() == 10);
  f.due(2, proto::reason_call, "steps");
  REQUIRE(f.http.requests.size() == 11);  // the probe, at once
  CHECK(f.shards_of(10) == std::vector<uint32_t>{2});
  CHECK((f.body(10).reasons & proto::reason_call) != 0);
  f.due(3, proto::reason_call, "steps");
  CHECK(f.http.requests.size() == 11);  // one probe at a time
  f.answer(f.last_id(), 500);           // it fails: shard 2 waits again, with shard 3
  CHECK(f.http.requests.size() == 11);
  f.advance(999ms);
  CHECK(f.http.requests.size() == 11);  // at most once a second
  f.advance(1ms);
  REQUIRE(f.http.requests.size() == 12);
  CHECK(sorted(f.shards_of(11)) == std::vector<uint32_t>{2, 3});
  // Probes that keep failing (each keeps the backoff at its cap) leave no entries behind in the
  // endpoint's queue: shards 0 and 1 wait there, and 2 and 3 between probes.
  for (int i = 0; i < 5; ++i) {
    f.answer(f.last_id(), 500);
    f.advance(1s);
    REQUIRE(f.http.requests.size() == static_cast<size_t>(13 + i));
    CHECK(sorted(f.shards_of(12 + i)) == std::vector<uint32_t>{2, 3});
    CHECK(f.ready_entries() <= 4);
  }
  // The probe is served: the endpoint is up, and the shards due for recovery go at once.
  f.served(f.last_id(), 9);
  REQUIRE(f.http.requests.size() == 18);
  CHECK(sorted(f.shards_of(17)) == std::vector<uint32_t>{0, 1});
}

TEST_CASE("an endpoint tells the directory its trouble when it changes: its last error while it "
          "fails, nothing once an invocation succeeds") {
  fixture f;
  f.answer(f.last_id(), 500);
  REQUIRE(f.fenced.trouble.size() == 1);
  CHECK(f.fenced.trouble[0] == "endpoint 0 (http://ep/invoke): answered HTTP 500");
  f.advance(121ms);
  f.answer(f.last_id(), 500);  // the same text: not told again
  CHECK(f.fenced.trouble.size() == 1);
  f.advance(241ms);
  f.served(f.last_id(), 7);
  REQUIRE(f.fenced.trouble.size() == 2);
  CHECK(f.fenced.trouble[1].empty());
}

TEST_CASE("a POST never sent (no connection free in time) is a failure with its reason that adds "
          "nothing to the endpoint's latency") {
  fixture f;
  auto id = f.last_id();
  f.not_sent(id, "not sent: no connection free within its 1500 ms", 1500.0);
  auto j = f.invoker_json();
  CHECK(j.find("\"failed\":1,\"timedOut\":0") != std::string::npos);
  CHECK(j.find("\"totalMs\":0,\"maxMs\":0") != std::string::npos);
  CHECK(j.find("\"lastError\":\"not sent: no connection free within its 1500 ms\"") !=
        std::string::npos);
  // The endpoint backs off as after any failure (100 ms ± 20 %): the node's shortage eases.
  f.advance(79ms);
  CHECK(f.http.requests.size() == 1);
  f.advance(42ms);
  CHECK(f.http.requests.size() == 2);
}

TEST_CASE("a POST this node's stop ended (cut, or never sent) is no failure of its endpoint: "
          "nothing counted, no backoff, nothing said") {
  fixture f;
  auto id = f.last_id();
  http_result res;
  res.id = id;
  res.error = "aborted: the server is stopping";
  res.total_ms = 700.0;
  res.stopping = true;
  f.request_of(id).done(std::move(res));
  f.sched.run();
  auto j = f.invoker_json();
  CHECK(j.find("\"failed\":0,\"timedOut\":0") != std::string::npos);
  CHECK(j.find("\"failuresInARow\":0,\"backoffMs\":0,\"totalMs\":0,\"maxMs\":0") !=
        std::string::npos);
  CHECK(j.find("\"lastError\":null") != std::string::npos);
  // The endpoint did not fail, but the stopping node sends the shard again no sooner than after
  // a failure's first backoff (the scheduler exits first today: this guards the order).
  CHECK(f.http.requests.size() == 1);
  f.advance(101ms);
  CHECK(f.http.requests.size() == 2);
}

TEST_CASE("invocations that fail together count as one failure in a row, not as many") {
  // 8 invocations in flight when the endpoint breaks: one step of backoff (100 ms), not eight
  // (12.8 s). The chaos load test found calls parked past their limit behind such jumps.
  fixture f{settings(8, {endpoint("http://a/invoke", {}, 8, 1)})};
  REQUIRE(f.http.requests.size() == 8);  // the start-up wave, one shard each
  for (size_t i = 0; i < 8; ++i)
    f.answer(f.body(i).invocation.value(), 500);
  CHECK(f.http.requests.size() == 8);
  f.advance(121ms);  // past 100 ms + 20 %
  REQUIRE(f.http.requests.size() == 16);
  // Those were sent after the counted failure: their failing is the second in a row (200 ms).
  for (size_t i = 8; i < 16; ++i)
    f.answer(f.body(i).invocation.value(), 500);
  f.advance(159ms);
  CHECK(f.http.requests.size() == 16);
  f.advance(82ms);
  CHECK(f.http.requests.size() == 24);
}

TEST_CASE("a success ends the backoff even from an invocation sent before the failure") {
  // An endpoint failing one POST in five must not climb to the cap: every wave of concurrent
  // POSTs then has a failure, and its successes (sent with it) must still count.
  fixture f{settings(2, {endpoint("http://a/invoke", {}, 2, 1)})};
  REQUIRE(f.http.requests.size() == 2);
  auto early = f.body(1).invocation.value();
  f.answer(f.body(0).invocation.value(), 500);  // counted: backoff 100 ms
  f.advance(50ms);
  CHECK(f.http.requests.size() == 2);
  f.served(early, 7);  // the endpoint answers: the backoff is over, shard 0 goes at once
  CHECK(f.http.requests.size() == 3);
}

TEST_CASE("a 2xx without a lease counts as unleased and is a failure") {
  fixture f;
  f.answer(f.last_id(), 200);        // nobody ever bound or leased
  CHECK(f.fenced.sessions.empty());  // nothing to fence
  f.advance(79ms);
  CHECK(f.http.requests.size() == 1);  // backing off like any failure
  f.advance(42ms);
  CHECK(f.http.requests.size() == 2);
}

TEST_CASE("a 2xx whose worker bound but found its shards leased elsewhere is no failure") {
  // At start the invoker and long-lived workers race for the same free shards: an invoked worker
  // that connected back but got no grant did nothing wrong, and its endpoint must not back off
  // (a wave of 32 such answers once backed it off for 30 s).
  fixture f;
  auto id = f.last_id();
  f.bind(id, 42);     // connected back, no shard leased
  f.answer(id, 200);  // its shards are still due: dispatched again at once, no backoff
  CHECK(f.http.requests.size() == 2);
  f.answer(f.last_id(), 200);  // this time nobody connected back: a failure
  CHECK(f.http.requests.size() == 2);
  f.advance(121ms);
  CHECK(f.http.requests.size() == 3);
}

TEST_CASE("every reason makes a shard due, and its POST names the reason") {
  fixture f{
      settings(4, {endpoint("http://a/invoke", {}), endpoint("http://b/invoke", {"billing"})})};
  f.settle();
  // call and message: parked work for a shard nobody holds
  f.due(0, proto::reason_call);
  f.expect_post(0, proto::reason_call, "http://a/invoke");
  f.due(1, proto::reason_message);
  f.expect_post(1, proto::reason_message, "http://a/invoke");
  // timer: the IDLE report said "due in 500 ms"
  lease_end timer;
  timer.due_in_ms = 500;
  f.lease_ended(2, timer);
  f.advance(499ms);
  CHECK(f.http.requests.empty());
  f.advance(1ms);
  f.expect_post(2, proto::reason_timer, "http://a/invoke");
  // recovery: a holder (not invoked) left without a report; no backoff for that
  lease_end gone;
  gone.crashed = true;
  f.lease_ended(3, gone);
  f.expect_post(3, proto::reason_recovery, "http://a/invoke");
  // handback: work left now, steps were made
  lease_end busy;
  busy.flags = proto::idle_busy;
  busy.steps = 3;
  busy.invoked = true;
  f.lease_ended(0, busy);
  f.expect_post(0, proto::reason_handback, "http://a/invoke");
  // code: the last holder (at a) had no code for "billing", which b serves
  lease_end lacking;
  lacking.types = {"billing"};
  lacking.invoked = true;
  f.lease_ended(1, lacking);
  f.expect_post(1, proto::reason_code, "http://b/invoke");
}

TEST_CASE(
    "a timer counts from its IDLE report, not from when the record hears of the lease's end") {
  fixture f{settings(2, {endpoint("http://a/invoke", {})})};
  f.settle();
  lease_end timer;
  timer.due_in_ms = 500;
  timer.reported_at = clock_ns(f.sched.clock().now());
  f.advance(300ms);  // the record hears of it 300 ms after the report (a busy directory)
  f.lease_ended(0, timer);
  f.advance(199ms);
  CHECK(f.counts()["waitingShards"] == 1);
  f.advance(1ms);  // due 500 ms after the report, not 800
  CHECK(f.counts()["dueShards"] == 1);
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.shards_of(0) == std::vector<uint32_t>{0});
  CHECK(f.body(0).reasons == proto::reason_timer);
}

TEST_CASE("a call is dispatched at once and takes along shards waiting in the gather window") {
  fixture f{settings(3, {endpoint("http://a/invoke", {})})};
  f.settle();
  lease_end timer;
  timer.due_in_ms = 0;  // due again at once
  f.lease_ended(0, timer);
  CHECK(f.http.requests.empty());  // gathering
  f.due(1, proto::reason_call);
  REQUIRE(f.http.requests.size() == 1);  // no wait for the call
  CHECK(f.shards_of(0) == std::vector<uint32_t>{0, 1});
  CHECK(f.body(0).reasons == (proto::reason_timer | proto::reason_call));
  f.advance(rules::gather_window);
  CHECK(f.http.requests.size() == 1);  // nothing left over
}

TEST_CASE("a leased shard is never due") {
  fixture f{settings(2, {endpoint("http://a/invoke", {})})};
  f.settle();
  f.leased(0);
  f.due(0, proto::reason_call);
  f.advance(10s);
  CHECK(f.http.requests.empty());
  f.due(1, proto::reason_call);  // the other one is not held
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.shards_of(0) == std::vector<uint32_t>{1});
}

TEST_CASE("a withheld shard is invoked for by nobody while it is withheld, and at once after") {
  fixture f{settings(3, {endpoint("http://a/invoke", {})})};
  f.settle();
  withheld_shards w{{withheld{{{0, 1}}, "node c serves a different map", true}}};
  caf::anon_send(f.scheduler, w);
  f.sched.run();
  f.due(0, proto::reason_call);
  f.due(2, proto::reason_call);  // not withheld: invoked alone
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.shards_of(0) == std::vector<uint32_t>{2});
  f.due(1, proto::reason_message);
  f.advance(10s);
  CHECK(f.http.requests.size() == 1);
  CHECK(f.counts()["dueShards"] == 2);  // still due: counted, not invoked
  actor_stats a;
  f.sys.spawn(stats_asker, f.scheduler, &a);
  f.sched.run();
  REQUIRE(a.find("withheldShards"));
  CHECK(a.find("withheldShards")->number == 2);
  caf::anon_send(f.scheduler, withheld_shards{});  // given back: both go out at once
  f.sched.run();
  REQUIRE(f.http.requests.size() == 2);
  CHECK(f.shards_of(1) == std::vector<uint32_t>{0, 1});
}

TEST_CASE("once halted (the log failed) the scheduler sends no invocation, though shards still "
          "become due, and says so in its stats") {
  fixture f{settings(2, {endpoint("http://a/invoke", {})})};
  f.settle();
  caf::anon_send(f.scheduler, halt_atom::value, std::string{"the log failed (fdatasync: EIO)"});
  f.sched.run();
  f.due(0, proto::reason_call);
  lease_end timer;
  timer.due_in_ms = 0;
  f.lease_ended(1, timer);
  f.advance(10s);
  CHECK(f.http.requests.empty());
  CHECK(f.counts()["dueShards"] == 2);
  actor_stats a;
  f.sys.spawn(stats_asker, f.scheduler, &a);
  f.sched.run();
  CHECK(a.state == "halted");
  REQUIRE(a.find("haltedBecause"));
  CHECK(a.find("haltedBecause")->text == "the log failed (fdatasync: EIO)");
  CHECK(f.invoker_json().find("\"halted\":true") != std::string::npos);
}

TEST_CASE("endpoint choice: a start's type, then code the last holder lacked, then the last "
          "endpoint, then one with no types") {
  fixture f{settings(4, {endpoint("http://a/invoke", {"a"}), endpoint("http://b/invoke", {}),
                         endpoint("http://c/invoke", {"c"})})};
  // at start nobody was invoked: the first endpoint with no types takes every shard
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.http.requests[0].url == "http://b/invoke");
  CHECK(f.shards_of(0).size() == 4);
  f.settle();
  // a waiting start of type "a" goes to a, whatever the last endpoint was
  f.due(0, proto::reason_call, "a");
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.http.requests[0].url == "http://a/invoke");
  f.served(f.last_id(), 1);
  f.http.requests.clear();
  // handed back by the worker a invoked: the last endpoint again
  lease_end busy;
  busy.flags = proto::idle_busy;
  busy.steps = 1;
  busy.invoked = true;
  f.lease_ended(0, busy);
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.http.requests[0].url == "http://a/invoke");
  f.served(f.last_id(), 2);
  f.http.requests.clear();
  // the worker from a lacked code for "c": c has it
  lease_end lacking;
  lacking.types = {"c"};
  lacking.invoked = true;
  f.lease_ended(0, lacking);
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.http.requests[0].url == "http://c/invoke");
  CHECK(f.body(0).reasons == proto::reason_code);
}

TEST_CASE("a handback's types send the next invocation to an endpoint with their code") {
  fixture f{
      settings(1, {endpoint("http://a/invoke", {}), endpoint("http://b/invoke", {"billing"})})};
  f.settle();
  f.due(0, proto::reason_call);
  f.expect_post(0, proto::reason_call, "http://a/invoke");
  // handed back with progress, but it had no code for "billing": b has it, not a again
  lease_end busy;
  busy.flags = proto::idle_busy;
  busy.steps = 1;
  busy.invoked = true;
  busy.types = {"billing"};
  f.lease_ended(0, busy);
  f.expect_post(0, proto::reason_handback, "http://b/invoke");
}

TEST_CASE("a long-lived holder's IDLE naming types makes the shard due for code, even at the last "
          "endpoint") {
  fixture f{
      settings(1, {endpoint("http://a/invoke", {}), endpoint("http://b/invoke", {"billing"})})};
  f.settle();
  f.due(0, proto::reason_call, "billing");  // b is now the last endpoint
  f.expect_post(0, proto::reason_call, "http://b/invoke");
  lease_end idle;
  idle.invoked = true;
  f.lease_ended(0, idle);
  // a long-lived worker (no endpoint) holds it, and lacked the code for "billing": b has it
  f.leased(0);
  lease_end lacking;
  lacking.types = {"billing"};
  f.lease_ended(0, lacking);
  f.expect_post(0, proto::reason_code, "http://b/invoke");
}

TEST_CASE("an invoked holder this node deposed is no crash of its worker, and the types it lacked "
          "still do not send its own endpoint again") {
  fixture f{
      settings(1, {endpoint("http://a/invoke", {}), endpoint("http://b/invoke", {"billing"})})};
  f.settle();
  f.due(0, proto::reason_call, "billing");
  f.expect_post(0, proto::reason_call, "http://b/invoke");
  // deposed (withheld) before it reported: recovery at once, no crash backoff
  lease_end deposed;
  deposed.crashed = true;
  deposed.invoked = true;
  deposed.holders_fault = false;
  f.lease_ended(0, deposed);
  f.http.requests.clear();
  f.expect_post(0, proto::reason_recovery, "http://b/invoke");
  // deposed after an IDLE saying it had no code for "billing": b, its endpoint, is not woken for
  // that code again
  lease_end lacking;
  lacking.types = {"billing"};
  lacking.invoked = true;
  lacking.holders_fault = false;
  f.lease_ended(0, lacking);
  f.http.requests.clear();
  f.advance(rules::gather_window);
  CHECK(f.http.requests.empty());
}

TEST_CASE("due shards are grouped into at most the free slots, at most max_shards each") {
  fixture f{settings(8, {endpoint("http://a/invoke", {}, 2, 3)})};
  // 8 shards due at start, 2 slots of 3 shards: 0-2 and 3-5 now, 6-7 wait for a slot
  REQUIRE(f.http.requests.size() == 2);
  CHECK(f.shards_of(0) == std::vector<uint32_t>{0, 1, 2});
  CHECK(f.shards_of(1) == std::vector<uint32_t>{3, 4, 5});
  auto first = f.body(0).invocation.value();
  f.served(first, 1);
  REQUIRE(f.http.requests.size() == 3);  // a slot came free
  CHECK(f.shards_of(2) == std::vector<uint32_t>{6, 7});
}

TEST_CASE("shards due together are packed into one invocation, not spread over the free slots") {
  // (a departure from the original invoker: rules::group says why)
  fixture f{settings(8, {endpoint("http://a/invoke", {}, 4, 0)})};
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.shards_of(0).size() == 8);
}

TEST_CASE("with max_shards = 0 an invocation holds at most what its IDLE can list in a frame") {
  auto s = settings(10'001, {endpoint("http://a/invoke", {}, 2, 0)});
  s.max_frame_mb = 1;  // 10,000 shards per invocation
  fixture f{s};
  REQUIRE(f.http.requests.size() == 2);
  CHECK(f.body(0).shards.size() == 10'000);
  CHECK(f.shards_of(1) == std::vector<uint32_t>{10'000});
}

TEST_CASE("the scheduler's counts of due, waiting, backing-off and invoking shards follow each "
          "change") {
  using counts = std::map<std::string, double>;
  auto of = [](double due, double waiting, double backoff, double invoking) {
    return counts{{"dueShards", due},
                  {"waitingShards", waiting},
                  {"backoffShards", backoff},
                  {"invokingShards", invoking}};
  };
  fixture f{settings(4, {endpoint("http://a/invoke", {}, 1, 3)})};
  CHECK(f.counts() == of(1, 0, 0, 3));  // one slot of 3 shards: shard 3 waits for it, due
  f.served(f.last_id(), 1);
  CHECK(f.counts() == of(0, 0, 0, 1));  // 0-2 leased (idle), 3 in the next invocation
  f.served(f.last_id(), 2);
  f.advance(1s);  // fenced
  CHECK(f.counts() == of(0, 0, 0, 0));
  lease_end timer;
  timer.invoked = true;
  timer.due_in_ms = 5000;  // due again in 5 s
  f.lease_ended(0, timer);
  lease_end crash;
  crash.crashed = true;
  crash.invoked = true;
  f.lease_ended(1, crash);
  f.lease_ended(2, lease_end{});
  CHECK(f.counts() == of(0, 1, 1, 0));
  f.advance(200ms);  // the crash's backoff (100 ms ± 20 %) is over
  CHECK(f.counts() == of(1, 1, 0, 0));
  f.advance(rules::gather_window);
  CHECK(f.counts() == of(0, 1, 0, 1));
  f.answer(f.last_id(), 500);  // failed: due again, the endpoint backs off
  CHECK(f.counts() == of(1, 1, 0, 0));
}

TEST_CASE("an invoked worker's crash backs its shard off, doubling with jitter") {
  fixture f{settings(1, {endpoint("http://a/invoke", {})})};
  f.settle();
  lease_end crash;
  crash.crashed = true;
  crash.invoked = true;
  f.lease_ended(0, crash);  // first crash: 100 ms ± 20 %, then the gather window
  f.advance(79ms);
  CHECK(f.http.requests.empty());
  f.advance(42ms);  // past the longest jittered backoff
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.body(0).reasons == proto::reason_recovery);
  f.served(f.last_id(), 1);
  f.lease_ended(0, crash);  // second crash in a row: 200 ms ± 20 %
  f.advance(159ms);
  CHECK(f.http.requests.size() == 1);
  f.advance(82ms);
  f.advance(rules::gather_window);
  CHECK(f.http.requests.size() == 2);
}

TEST_CASE("a crash's backoff ends when a later holder reports progress: its handback is "
          "invoked at once") {
  fixture f{settings(1, {endpoint("http://a/invoke", {})})};
  f.settle();
  lease_end crash;
  crash.crashed = true;
  crash.invoked = true;
  f.lease_ended(0, crash);  // backs off 100 ms ± 20 %
  f.leased(0);              // a long-lived worker takes the shard meanwhile
  lease_end handback;
  handback.flags = proto::idle_busy;
  handback.steps = 3;
  f.lease_ended(0, handback);  // and hands it back with work left, 0 ms after the crash
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);  // not after the crash's backoff
  CHECK(f.body(0).reasons == proto::reason_handback);
}

TEST_CASE("a handback with the budget spent and no step backs off from 1 s (no progress)") {
  fixture f{settings(1, {endpoint("http://a/invoke", {})})};
  f.settle();
  lease_end stuck;
  stuck.flags = proto::idle_busy | proto::idle_expired;
  stuck.steps = 0;
  stuck.invoked = true;
  f.lease_ended(0, stuck);  // 1 s ± 20 %, then the gather window
  f.advance(799ms);
  CHECK(f.http.requests.empty());
  f.advance(402ms);
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.body(0).reasons == proto::reason_handback);
  f.served(f.last_id(), 1);
  f.lease_ended(0, stuck);  // again: 2 s ± 20 %
  f.advance(1599ms);
  CHECK(f.http.requests.size() == 1);
  f.advance(802ms);
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 2);
  // a step finally done within the budget resets it: the next handback is at once
  f.served(f.last_id(), 2);
  lease_end progress = stuck;
  progress.steps = 1;
  f.lease_ended(0, progress);
  f.advance(rules::gather_window);
  CHECK(f.http.requests.size() == 3);
}

TEST_CASE("a lease whose invocation ran out budget + grace with nothing written is a crash and no "
          "progress, backing off from 1 s, while one that wrote backs off as a crash") {
  fixture f{settings(1, {endpoint("http://a/invoke", {})})};
  f.settle();
  lease_end overran;
  overran.crashed = true;
  overran.invoked = true;
  overran.overran = true;
  overran.wrote = false;
  f.lease_ended(0, overran);  // 1 s ± 20 %, then the gather window
  CHECK(f.invoker_json().find("\"crashes\":1,\"noProgress\":1") != std::string::npos);
  f.advance(799ms);
  CHECK(f.http.requests.empty());
  f.advance(402ms);
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 1);
  CHECK(f.body(0).reasons == proto::reason_recovery);
  f.served(f.last_id(), 1);
  lease_end wrote = overran;  // the step overran after others were written: a crash
  wrote.wrote = true;
  f.lease_ended(0, wrote);  // second failure in a row, as a crash: 200 ms ± 20 %
  CHECK(f.invoker_json().find("\"crashes\":2,\"noProgress\":1") != std::string::npos);
  f.advance(159ms);
  CHECK(f.http.requests.size() == 1);
  f.advance(82ms);
  f.advance(rules::gather_window);
  CHECK(f.http.requests.size() == 2);
}

TEST_CASE("a shard due only for calls that all expired is idle again: nothing goes out for it "
          "when its endpoint's backoff ends") {
  fixture f{settings(2, {endpoint("http://a/invoke", {})})};
  f.settle();
  f.due(0, proto::reason_call, "billing");  // sent at once
  REQUIRE(f.http.requests.size() == 1);
  f.answer(f.last_id(), 500);  // the endpoint backs off 100 ms ± 20 %
  f.undue(0, proto::reason_call);
  f.advance(1s);
  CHECK(f.http.requests.size() == 1);
  CHECK(f.counts()["dueShards"] == 0);
  // Due for a timer too: it stays due, for the timer alone.
  f.due(1, proto::reason_timer);
  f.due(1, proto::reason_call);
  f.advance(rules::gather_window);
  REQUIRE(f.http.requests.size() == 2);
  f.answer(f.last_id(), 500);
  f.undue(1, proto::reason_call);
  f.advance(1s);
  REQUIRE(f.http.requests.size() == 3);
  CHECK(f.body(2).reasons == proto::reason_timer);
}

TEST_CASE("shards without progress warn once a minute between them, the others at debug") {
  logging::init(spdlog::level::info);
  fixture f{settings(3, {endpoint("http://a/invoke", {})})};
  f.settle();
  lease_end stuck;
  stuck.flags = proto::idle_busy | proto::idle_expired;
  stuck.invoked = true;
  for (uint32_t shard : {0u, 1u, 2u})
    f.lease_ended(shard, stuck);
  auto problems = logging::recent_problems();
  auto warned = std::count_if(problems.begin(), problems.end(), [](const std::string& line) {
    return line.find("without finishing a step") != std::string::npos;
  });
  CHECK(warned <= 1);  // (0 if an earlier test in this process warned within the minute)
}

namespace {

/// Advances simulated time in `step`s until a new POST goes out; returns how long that took.
caf::timespan wait_for_post(fixture& f, caf::timespan step, caf::timespan limit) {
  auto before = f.http.requests.size();
  caf::timespan waited{0};
  while (f.http.requests.size() == before && waited < limit) {
    f.advance(step);
    waited += step;
  }
  REQUIRE(f.http.requests.size() == before + 1);
  return waited;
}

}  // namespace

TEST_CASE("backoff caps: endpoint failures at 30 s, crashes at 30 s, no progress at 300 s") {
  SUBCASE("an endpoint failing again and again waits 30 s ± 20 % at most") {
    fixture f;
    for (int n = 1; n <= 12; ++n) {
      f.answer(f.last_id(), 500);
      auto waited = wait_for_post(f, 10ms, 40s);
      if (n >= 10) {  // 100 ms · 2^9 > 30 s: capped
        CHECK(waited >= 24s);
        CHECK(waited <= 36010ms);
      }
    }
  }
  SUBCASE("a shard whose invoked workers keep crashing waits 30 s ± 20 % at most") {
    fixture f{settings(1, {endpoint("http://a/invoke", {})})};
    f.settle();
    lease_end crash;
    crash.crashed = true;
    crash.invoked = true;
    for (int n = 1; n <= 12; ++n) {
      f.lease_ended(0, crash);
      auto waited = wait_for_post(f, 10ms, 40s);
      if (n >= 10) {
        CHECK(waited >= 24s);
        CHECK(waited <= 36010ms);
      }
      f.served(f.last_id(), 1);
    }
  }
  SUBCASE("a shard that never finishes a step waits 300 s ± 20 % at most") {
    fixture f{settings(1, {endpoint("http://a/invoke", {})})};
    f.settle();
    lease_end stuck;
    stuck.flags = proto::idle_busy | proto::idle_expired;
    stuck.invoked = true;
    for (int n = 1; n <= 11; ++n) {
      f.lease_ended(0, stuck);
      auto waited = wait_for_post(f, 100ms, 400s);
      if (n >= 10) {  // 1 s · 2^9 > 300 s: capped
        CHECK(waited >= 240s);
        CHECK(waited <= 360100ms);
      }
      f.served(f.last_id(), 1);
    }
  }
}
