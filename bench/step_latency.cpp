// Step latency: one worker, one shard, sequential APPEND -> DURABLE over loopback TCP.
//   step_latency HOST:PORT [steps] [record_bytes]
// Prints p50/p99/mean (and p99.9, max) in microseconds as one line of JSON. With STEP_TRACE=FILE
// set, each counted step's start (µs from the first) and latency (µs) go to FILE, a line each.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/address_arg.hpp"
#include "client/connection.hpp"

using namespace fusee;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: step_latency HOST:PORT [steps] [record_bytes]\n");
    return 2;
  }
  std::string addr = argv[1];
  int steps = argc > 2 ? std::stoi(argv[2]) : 5000;
  size_t size = argc > 3 ? std::stoul(argv[3]) : 100;
  auto at = bench::address_arg(addr.c_str());
  auto c = client::connection::open(at.host, at.port);
  if (!c) {
    std::fprintf(stderr, "%s\n", c.err().message.c_str());
    return 1;
  }
  auto lease = client::hello(*c, 0, 1, "bench-step");
  if (!lease || lease->grants.empty()) {
    std::fprintf(stderr, "no lease\n");
    return 1;
  }
  auto g = lease->grants[0];
  uint64_t lsn = g.durable_lsn.value();
  proto::bytes rec(size, 'x');
  std::vector<double> us;
  us.reserve(steps);
  std::vector<double> starts;  // µs from the first counted step, for STEP_TRACE
  starts.reserve(steps);
  std::chrono::steady_clock::time_point first;
  for (int i = 0; i < steps + 100; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    proto::append a{proto::request_head{0, g.shard, g.epoch}, proto::lsn_t{lsn + 1}, {rec}};
    c->send(a);
    ++lsn;
    for (;;) {
      auto r = c->receive(std::chrono::seconds(10));
      if (!r) {
        std::fprintf(stderr, "%s\n", r.err().message.c_str());
        return 1;
      }
      if (auto* d = std::get_if<proto::durable>(&*r))
        if (!d->positions.empty() && d->positions.back().lsn.value() >= lsn) break;
    }
    auto t1 = std::chrono::steady_clock::now();
    if (i == 100) first = t0;
    if (i >= 100) {  // warm-up excluded
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
      starts.push_back(std::chrono::duration<double, std::micro>(t0 - first).count());
    }
  }
  if (const char* trace = std::getenv("STEP_TRACE")) {
    FILE* f = std::fopen(trace, "w");
    if (!f) {
      std::fprintf(stderr, "step_latency: cannot write STEP_TRACE %s\n", trace);
      return 1;
    }
    for (size_t i = 0; i < us.size(); ++i)
      std::fprintf(f, "%.1f %.1f\n", starts[i], us[i]);
    std::fclose(f);
  }
  std::sort(us.begin(), us.end());
  double mean = 0;
  for (double v : us)
    mean += v;
  mean /= us.size();
  std::printf("{\"steps\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f,"
              "\"p999_us\":%.1f,\"max_us\":%.1f}\n",
              steps, us[us.size() / 2], us[us.size() * 99 / 100], mean, us[us.size() * 999 / 1000],
              us.back());
  return 0;
}
