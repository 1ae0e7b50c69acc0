#include "worker/runtime.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "client/address.hpp"
#include "client/connection.hpp"
#include "protocol/json_text.hpp"
#include "protocol/signature.hpp"
#include "protocol/unix_time.hpp"
#include "worker/session.hpp"

namespace fusee::worker {

namespace {

using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
constexpr uint64_t never = std::numeric_limits<uint64_t>::max();

}  // namespace

verified_invocation verify_invocation(std::string_view signature_header, std::string_view body,
                                      const std::vector<std::string>& secrets,
                                      uint64_t tolerance_ms) {
  verified_invocation v;
  if (signature_header.empty()) {
    v.refusal = {401, proto::json_error("no fusee-signature header")};
    return v;
  }
  if (auto bad = proto::verify(signature_header, body, secrets, proto::unix_ms(), tolerance_ms)) {
    v.refusal = {401, proto::json_error(bad->message)};
    return v;
  }
  auto req = proto::parse_invocation_request(body);
  if (!req) {
    v.refusal = {400, proto::json_error(req.err().message)};
    return v;
  }
  v.request = std::move(*req);
  return v;
}

invocation_outcome runtime::serve_post(std::string_view signature_header, std::string_view body,
                                       const std::vector<std::string>& secrets,
                                       uint64_t tolerance_ms) {
  auto v = verify_invocation(signature_header, body, secrets, tolerance_ms);
  if (!v.request) return v.refusal;
  return invoke(*v.request);
}

runtime::runtime(const registry& types, worker_options options)
    : types_(types), options_(std::move(options)) {}

runtime::~runtime() = default;

int runtime::run() {
  return serve(options_, true);
}

int runtime::serve(const worker_options& opts, bool follow_map) {
  std::vector<std::thread> others;  // one per other node of the cluster
  struct joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    bool stop_them = false;
    ~joiner() {
      if (stop_them) stop = true;
      for (auto& t : threads)
        t.join();
    }
  } join_others{stop_, others};
  reconnect_backoff backoff;
  uint32_t offers = proto::offer_serve_calls | proto::offer_cluster_map;
  auto pause = [&](std::chrono::milliseconds d) {
    for (auto until = clock::now() + d; clock::now() < until && !stop_;)
      std::this_thread::sleep_for(20ms);
  };
  if (!client::parse_host_port(opts.server)) {  // no retry can mend it
    session(types_, opts).log("the server address " + opts.server + " is not host:port");
    join_others.stop_them = follow_map;  // (another node's thread ends alone)
    return 2;
  }
  while (!stop_) {
    session s(types_, opts);
    auto ok = s.connect(offers, proto::invocation_id{}, &stop_);
    if (!ok && ok.err().code == proto::err_code::bad_offer && (offers & proto::offer_cluster_map)) {
      // A server without the cluster-map extension (docs/protocol.md): serve it alone.
      s.log("the server does not know the CLUSTER_MAP offer; serving it alone");
      offers &= ~proto::offer_cluster_map;
      continue;
    }
    if (!ok) {
      // A refusal of the HELLO itself (version, offers, a token that may not hold shards) will
      // not change by retrying.
      if (ok.err().code == proto::err_code::version ||
          ok.err().code == proto::err_code::bad_offer || s.hello_refused()) {
        s.log("the server refused this worker: " + ok.err().to_string());
        join_others.stop_them = follow_map;  // another node's refusal ends its thread alone
        return 2;
      }
      if (stop_) break;  // (stopped during the HELLO: no retry to announce)
      auto wait = backoff.after_failed_connect();
      s.log("cannot serve: " + ok.err().message + "; retrying in " + std::to_string(wait.count()) +
            " ms");
      pause(wait);
      continue;
    }
    auto connected = clock::now();
    s.log("connected to " + opts.server + ", holding " + std::to_string(s.held()) + " shard(s)");
    // A cluster: the other nodes' shards are held through connections of their own, one thread
    // each, started once (the map is static).
    if (auto& map = s.cluster_map(); follow_map && others.empty() && map && !map->nodes.empty()) {
      std::string names;
      for (auto& n : map->nodes) {
        if (n.name == map->node) continue;
        auto o = opts;
        o.server = n.listen;
        o.name = opts.name + "@" + n.name;
        others.emplace_back([this, o] { serve(o, false); });
        names += (names.empty() ? "" : ", ") + n.name + " (" + n.listen + ")";
      }
      s.log("cluster map " + map->digest.substr(0, 12) + " from node " + map->node +
            ": also serving " + names);
    }
    bool alive = true;
    while (alive && !stop_)
      alive = s.turn(s.next_wait(200ms));
    if (!alive) {
      s.log("connection lost (" + s.lost() + "); reconnecting");
      pause(backoff.after_connection(clock::now() - connected));
      continue;
    }
    if (!s.stop_serving(5s)) s.log("stopping before every checkpoint was confirmed");
    s.close();
  }
  return 0;
}

invocation_outcome runtime::invoke(const proto::invocation_request& request) {
  auto opts = options_;
  opts.server = request.server;
  session s(types_, opts);
  auto id = proto::format_invocation_id(request.invocation);
  if (auto ok = s.connect(proto::offer_invoked | proto::offer_serve_calls, request.invocation);
      !ok) {
    s.log("invocation " + id + ": " + ok.err().to_string());
    return {503, proto::json_error("the server could not be reached or refused the invocation: " +
                                   ok.err().to_string())};
  }
  auto start = clock::now();
  auto budget = std::chrono::milliseconds(s.remaining_ms());
  auto margin = std::clamp<std::chrono::milliseconds>(budget / 10, 200ms, 2000ms);
  auto leave_at = start + budget - margin;
  bool expired = false;
  // Run until every shard is recovered, quiet for quiet_ms, and nothing is due within linger.
  for (;;) {
    auto now = clock::now();
    if (now >= leave_at) {
      expired = true;
      break;
    }
    if (stop_) break;  // the program is stopping: leave as if idle
    if (opts.drop_invocation_after_ms &&
        now - start >= std::chrono::milliseconds(opts.drop_invocation_after_ms)) {
      s.close();
      s.log("invocation " + id + ": connection dropped on purpose (fault injection)");
      return {503, proto::json_error("the invocation dropped its connection (fault injection)")};
    }
    if (s.all_started() && s.all_quiet() &&
        now - s.last_received() >= std::chrono::milliseconds(opts.quiet_ms)) {
      uint64_t wake = s.next_wake();
      if (wake == never || wake > s.now_ms() + opts.linger_ms) break;
    }
    auto cap = std::chrono::duration_cast<std::chrono::milliseconds>(leave_at - now);
    if (!s.turn(s.next_wait(std::min<std::chrono::milliseconds>(cap, 50ms)))) {
      s.log("invocation " + id + ": connection lost (" + s.lost() + ")");
      return {503, proto::json_error("connection to the server lost: " + s.lost())};
    }
  }
  // Leaving: DRAIN, a checkpoint if enough is new, the disk caught up, IDLE. A connection lost
  // on the way is the same failure as one lost before.
  bool drained = s.drain(3s);
  s.checkpoint_if(opts.checkpoint_at_leave);
  bool settled = drained && s.settle(3s);
  bool reported = settled && s.report_idle(expired, 3s);
  s.close();
  if (!s.lost().empty()) {
    s.log("invocation " + id + ": connection lost while leaving (" + s.lost() + ")");
    return {503, proto::json_error("connection to the server lost: " + s.lost())};
  }
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start);
  std::string body =
      "{\"invocation\":\"" + id + "\",\"shards\":" + std::to_string(s.held()) +
      ",\"calls\":" + std::to_string(s.calls()) + ",\"steps\":" + std::to_string(s.steps()) +
      ",\"running\":" + std::to_string(s.running()) +
      ",\"expired\":" + (expired ? "true" : "false") +
      ",\"idle_reported\":" + (reported ? "true" : "false") +
      ",\"ms\":" + std::to_string(took.count()) + ",\"lease_us\":" +
      std::to_string(
          std::chrono::duration_cast<std::chrono::microseconds>(s.lease_wait()).count()) +
      "}";
  return {200, body};
}

}  // namespace fusee::worker
