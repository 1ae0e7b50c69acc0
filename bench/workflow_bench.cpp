// The workflow runtime's cost, with a worker running in this process against a real server:
//   workflow_bench HOST:PORT chain [steps] [rounds]
//     one workflow of `steps` sequential no-op steps per round: the time from the start call to
//     its durable result, per step (median of rounds), as one line of JSON.
//   workflow_bench HOST:PORT many [workflows] [steps] [connections] [in_flight]
//     `workflows` workflows of `steps` no-op steps, started through `connections` client
//     connections with `in_flight` starts pipelined on each; workflows/s and steps/s until every
//     one is durable-complete, as one line of JSON.
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
    if (!s || s->body.value("status", "") != "completed")
      return std::fprintf(stderr, "round %d: %s\n", r, s ? s->body.dump().c_str() : "failed"), 1;
    double us = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count();
    per_step.push_back(us / steps);
  }
  std::printf("{\"steps\":%d,\"rounds\":%d,\"per_step_us\":%.2f,\"workflow_ms\":%.3f}\n", steps,
              rounds, median(per_step), median(per_step) * steps / 1000.0);
  return 0;
}

int many(const std::string& server, int workflows, int steps, int connections, int in_flight) {
  in_process_worker w(server);
  {
    auto c = worker::workflow_client::connect(server, "bench-warm");
    if (!c) return std::fprintf(stderr, "%s\n", c.err().message.c_str()), 1;
    auto warm = c->start("noop", "warm", json{{"steps", 1}});
    if (!warm || !warm->ok()) return std::fprintf(stderr, "warm-up failed\n"), 1;
  }
  auto at = bench::address_arg(server.c_str());
  std::vector<std::thread> threads;
  std::atomic<int> failed{0};
  auto t0 = clock_type::now();
  for (int k = 0; k < connections; ++k)
    threads.emplace_back([&, k] {
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
        if (res->status != 0 ||
            std::string(res->body.begin(), res->body.end()).find("\"completed\"") ==
                std::string::npos)
          ++failed;
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
                         "[connections] [in_flight]\n");
    return 2;
  }
  std::string server = argv[1], mode = argv[2];
  auto arg = [&](int i, int def) { return argc > i ? std::stoi(argv[i]) : def; };
  if (mode == "chain") return chain(server, arg(3, 1000), arg(4, 20));
  if (mode == "many") return many(server, arg(3, 10000), arg(4, 10), arg(5, 8), arg(6, 128));
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
