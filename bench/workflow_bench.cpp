// The workflow runtime's cost, with a worker running in this process against a real server:
//   workflow_bench HOST:PORT chain [steps] [rounds]
//     one workflow of `steps` sequential no-op steps per round: the time from the start call to
//     its durable result, per step (median of rounds), as one line of JSON.
//   workflow_bench HOST:PORT many [workflows] [steps] [connections] [in_flight]
//     `workflows` workflows of `steps` no-op steps, started through `connections` client
//     connections with `in_flight` starts pipelined on each; workflows/s and steps/s until every
//     one is durable-complete, as one line of JSON. HOST:PORT may list several addresses
//     (a,b,c: a cluster's nodes): the worker starts at the first and follows the cluster map; the
//     client connections are spread over them in turn.
//   workflow_bench HOST:PORT calls [calls] DIRECT VIA FIRST-LAST
//     a cluster: the worker follows the map from HOST:PORT; one workflow on a shard in
//     FIRST..LAST (served by the node at DIRECT); then `calls` `describe` calls alternately
//     straight to DIRECT and through VIA (forwarded over CAF), p50/p99 of each, as JSON.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/address_arg.hpp"
#include "client/connection.hpp"
#include "protocol/shard_hash.hpp"
#include "worker/client.hpp"
#include "worker/runtime.hpp"

using namespace fusee;
using worker::json;
using clock_type = std::chrono::steady_clock;

namespace {

worker::task<json> noop_chain(worker::context& ctx, json input) {
  int n = input.value("steps", 10);
  std::string name = "s";
  for (int i = 0; i < n; ++i)
    co_await ctx.step(name, [] { return 0; });
  co_return n;
}

/// A long-lived worker holding every shard, on its own thread.
struct in_process_worker {
  worker::registry types;
  std::unique_ptr<worker::runtime> rt;
  std::thread thread;
  explicit in_process_worker(const std::string& server) {
    types.add("noop", noop_chain);
    worker::worker_options o;
    o.server = server;
    o.name = "bench-worker";
    o.runner.checkpoint_every = 100000;
    o.log = [](const std::string&) {};
    rt = std::make_unique<worker::runtime>(types, o);
    thread = std::thread([this] { rt->run(); });
  }
  ~in_process_worker() {
    rt->stop();
    thread.join();
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

int chain(const std::string& server, int steps, int rounds) {
  in_process_worker w(server);
  auto c = worker::workflow_client::connect(server, "bench-chain");
  if (!c) return std::fprintf(stderr, "%s\n", c.err().message.c_str()), 1;
  // Warm up: the worker has its lease and the first call has gone through.
  auto warm = c->start("noop", "warm", json{{"steps", 1}});
  if (!warm || !warm->ok()) return std::fprintf(stderr, "warm-up failed\n"), 1;
  std::vector<double> per_step;
  for (int r = 0; r < rounds; ++r) {
    auto id = "chain-" + std::to_string(r);
    auto t0 = clock_type::now();
    auto s = c->start("noop", id, json{{"steps", steps}});
    // A start is answered once the run first waits or yields the worker's turn (50 ms of
    // steps): then its result is asked for, waiting.
    if (s && s->ok() && s->body.value("status", "") == "running") s = c->result(id, 60000);
    if (!s || s->body.value("status", "") != "completed")
      return std::fprintf(stderr, "round %d: %s\n", r, s ? s->body.dump().c_str() : "failed"), 1;
    double us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
    per_step.push_back(us / steps);
  }
  std::printf("{\"steps\":%d,\"rounds\":%d,\"per_step_us\":%.2f,\"workflow_ms\":%.3f}\n", steps,
              rounds, median(per_step), median(per_step) * steps / 1000.0);
  return 0;
}

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(q * double(v.size())))];
}

int calls(const std::string& server, int n, const std::string& direct, const std::string& via,
          uint32_t first, uint32_t last) {
  in_process_worker w(server);
  auto d = worker::workflow_client::connect(direct, "bench-direct");
  auto v = worker::workflow_client::connect(via, "bench-via");
  if (!d || !v) return std::fprintf(stderr, "cannot connect\n"), 1;
  auto shards = d->shard_count();
  std::string id;
  for (int k = 0; id.empty(); ++k) {
    auto candidate = "target-" + std::to_string(k);
    auto s = proto::shard_for(candidate, shards).value();
    if (s >= first && s <= last) id = candidate;
  }
  // Warm up (the worker has its leases; both paths have carried a call), then alternate.
  for (int i = 0; i < 100; ++i) {
    auto a = d->start("noop", id, json{{"steps", 1}}, 10000);
    auto b = v->describe(id);
    if (!a || !b || !a->ok() || !b->ok())
      return std::fprintf(stderr, "warm-up failed: %s\n",
                          a && b ? (a->ok() ? b->body : a->body).dump().c_str() : "no answer"),
             1;
  }
  std::vector<double> direct_us, via_us;
  for (int i = 0; i < n; ++i)
    for (auto* c : {&*d, &*v}) {
      auto t0 = clock_type::now();
      auto r = c->describe(id);
      if (!r || !r->ok()) return std::fprintf(stderr, "call failed\n"), 1;
      (c == &*d ? direct_us : via_us)
          .push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
    }
  std::printf("{\"calls\":%d,\"direct_p50_us\":%.1f,\"direct_p99_us\":%.1f,"
              "\"forwarded_p50_us\":%.1f,\"forwarded_p99_us\":%.1f}\n",
              n, quantile(direct_us, 0.5), quantile(direct_us, 0.99), quantile(via_us, 0.5),
              quantile(via_us, 0.99));
  return 0;
}

/// Request ids from here on are `result` calls (a start's id + this), below are starts.
constexpr uint64_t result_ids = uint64_t{1} << 40;

int many(const std::string& servers, int workflows, int steps, int connections, int in_flight) {
  auto addresses = client::split_address_list(servers);
  auto server = addresses.front();
  in_process_worker w(server);
  {
    auto c = worker::workflow_client::connect(server, "bench-warm");
    if (!c) return std::fprintf(stderr, "%s\n", c.err().message.c_str()), 1;
    auto warm = c->start("noop", "warm", json{{"steps", 1}});
    if (!warm || !warm->ok()) return std::fprintf(stderr, "warm-up failed\n"), 1;
  }
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  auto t0 = clock_type::now();
  for (int k = 0; k < connections; ++k)
    threads.emplace_back([&, k] {
      auto at = bench::address_arg(addresses[k % addresses.size()].c_str());
      auto c = client::connection::open(at.host, at.port);
      if (!c) return void(++failed);
      c->send(proto::client_hello{proto::request_head{1}, proto::protocol_version, "bench"});
      auto ok = c->receive(std::chrono::seconds(10));
      auto* o = ok ? std::get_if<proto::ok>(&*ok) : nullptr;
      auto shards = o ? proto::client_hello_shard_count(*o) : std::nullopt;
      if (!shards) return void(++failed);
      int mine = workflows / connections + (k < workflows % connections ? 1 : 0);
      int sent = 0, done = 0;
      while (done < mine) {
        while (sent < mine && sent - done < in_flight) {
          auto id = "wf-" + std::to_string(k) + "-" + std::to_string(sent);
          auto args = json{{"id", id}, {"type", "noop"}, {"input", {{"steps", steps}}}}.dump();
          c->send(proto::call{proto::request_head{uint64_t(sent) + 2, proto::shard_for(id, *shards),
                                                  proto::epoch_t{0}},
                              "start", "noop", proto::bytes(args.begin(), args.end()), 0});
          ++sent;
        }
        auto r = c->receive(std::chrono::seconds(60));
        auto* res = r ? std::get_if<proto::call_result>(&*r) : nullptr;
        if (!res) return void(++failed);
        auto body = json::parse(res->body.begin(), res->body.end(), nullptr, false);
        auto status = body.is_object() ? body.value("status", "") : "";
        if (res->status == 0 && status == "running" && res->id < result_ids) {
          // Answered before its steps ended (it yielded the worker's turn): its result, waited
          // for, counts it done.
          auto id = body.value("id", "");
          auto args = json{{"id", id}, {"wait_ms", 60000}}.dump();
          c->send(proto::call{proto::request_head{result_ids + res->id,
                                                  proto::shard_for(id, *shards), proto::epoch_t{0}},
                              "result", "", proto::bytes(args.begin(), args.end()), 0});
          continue;
        }
        if (res->status != 0 || status != "completed") ++failed;
        ++done;
      }
    });
  for (auto& t : threads)
    t.join();
  double s = std::chrono::duration<double>(clock_type::now() - t0).count();
  std::printf("{\"workflows\":%d,\"steps\":%d,\"seconds\":%.3f,\"workflows_per_s\":%.0f,"
              "\"steps_per_s\":%.0f,\"records_per_s\":%.0f,\"failed\":%d}\n",
              workflows, steps, s, workflows / s, double(workflows) * steps / s,
              double(workflows) * (steps + 2) / s, failed.load());
  return failed ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: workflow_bench HOST:PORT chain [steps] [rounds]\n"
                         "       workflow_bench HOST:PORT many [workflows] [steps] "
                         "[connections] [in_flight]\n"
                         "       workflow_bench HOST:PORT calls [calls] DIRECT VIA FIRST-LAST\n");
    return 2;
  }
  std::string server = argv[1], mode = argv[2];
  auto arg = [&](int i, int def) { return argc > i ? std::stoi(argv[i]) : def; };
  if (mode == "chain") return chain(server, arg(3, 1000), arg(4, 20));
  if (mode == "many") return many(server, arg(3, 10000), arg(4, 10), arg(5, 8), arg(6, 128));
  if (mode == "calls" && argc == 7) {
    std::string range = argv[6];
    auto dash = range.find('-');
    return calls(server, arg(3, 2000), argv[4], argv[5],
                 static_cast<uint32_t>(std::stoul(range.substr(0, dash))),
                 static_cast<uint32_t>(std::stoul(range.substr(dash + 1))));
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
