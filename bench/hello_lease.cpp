// HELLO -> LEASE: a worker connects, says HELLO for one shard, waits for its LEASE (a durable
// grant) and leaves; N times, with PAUSE_MS between rounds. The pause shows what an idle machine
// costs: cold wakes always come after idle time.
//   hello_lease HOST:PORT [rounds] [pause_ms]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/address_arg.hpp"
#include "client/connection.hpp"

using namespace fusee;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: hello_lease HOST:PORT [rounds] [pause_ms]\n");
    return 2;
  }
  auto at = bench::address_arg(argv[1]);
  int rounds = argc > 2 ? std::stoi(argv[2]) : 200;
  int pause_ms = argc > 3 ? std::stoi(argv[3]) : 0;
  std::vector<double> connect_us, lease_us;
  for (int i = 0; i < rounds; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto c = client::connection::open(at.host, at.port);
    if (!c) {
      std::fprintf(stderr, "%s\n", c.err().message.c_str());
      return 1;
    }
    auto t1 = std::chrono::steady_clock::now();
    auto lease = client::hello(*c, 0, 1, "bench-hello-lease");
    auto t2 = std::chrono::steady_clock::now();
    if (!lease || lease->grants.empty()) {
      std::fprintf(stderr, "no lease\n");
      return 1;
    }
    connect_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    lease_us.push_back(std::chrono::duration<double, std::micro>(t2 - t1).count());
    c->close();
    if (pause_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
  };
  std::printf("{\"rounds\":%d,\"pause_ms\":%d,\"connect_p50_us\":%.0f,\"lease_p50_us\":%.0f,"
              "\"lease_p99_us\":%.0f,\"lease_max_us\":%.0f}\n",
              rounds, pause_ms, pct(connect_us, 0.5), pct(lease_us, 0.5), pct(lease_us, 0.99),
              pct(lease_us, 1.0));
  return 0;
}
