// The machine's floor for a chain of thread hand-offs, without fusee: a token passes along HOPS
// threads, each asleep on its own eventfd until the one before writes it, and back to the start.
// One chain per call, CALLS calls GAP_MS apart (bench/cold_wake's spacing, so the threads fall
// asleep between calls as the server's do). A cold wake's server share has about 20 such
// hand-offs (docs/benchmarks.md, "The machine's wake floor"): this is what that many cost on this
// machine with no work in them, p99 above all. (Kernel wake-ups only: CAF's scheduler threads
// may spin a little before they sleep, so it is an approximate floor.)
//   wake_floor [hops] [calls] [gap_ms]
// Prints one JSON line: the chain's p50/p99 and the p50 per hop, in microseconds.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <sys/eventfd.h>
#include <unistd.h>

namespace {

void signal(int fd) {
  uint64_t one = 1;
  if (::write(fd, &one, sizeof(one)) != sizeof(one)) std::perror("eventfd write");
}

/// Blocks until `fd` was signalled; false once it says stop (a count above one).
bool await(int fd) {
  uint64_t n = 0;
  if (::read(fd, &n, sizeof(n)) != sizeof(n)) return false;
  return n == 1;
}

}  // namespace

int main(int argc, char** argv) {
  int hops = argc > 1 ? std::stoi(argv[1]) : 20;
  int calls = argc > 2 ? std::stoi(argv[2]) : 300;
  int gap_ms = argc > 3 ? std::stoi(argv[3]) : 26;
  if (hops < 2 || calls < 1 || gap_ms < 0) {
    std::fprintf(stderr, "usage: wake_floor [hops >= 2] [calls >= 1] [gap_ms >= 0]\n");
    return 2;
  }
  // fds[i] wakes thread i; thread 0 is this one, which times the chain.
  std::vector<int> fds(static_cast<size_t>(hops));
  for (auto& fd : fds)
    if ((fd = ::eventfd(0, EFD_CLOEXEC)) < 0) {
      std::perror("eventfd");
      return 1;
    }
  std::vector<std::thread> threads;
  for (int i = 1; i < hops; ++i)
    threads.emplace_back([&, i] {
      while (await(fds[static_cast<size_t>(i)]))
        signal(fds[static_cast<size_t>((i + 1) % hops)]);
    });
  std::vector<double> us;
  for (int c = 0; c < calls; ++c) {
    auto t0 = std::chrono::steady_clock::now();
    signal(fds[1]);
    await(fds[0]);
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
  }
  for (int i = 1; i < hops; ++i) {  // a count of two ends each thread
    uint64_t two = 2;
    if (::write(fds[static_cast<size_t>(i)], &two, sizeof(two)) != sizeof(two)) return 1;
  }
  for (auto& t : threads)
    t.join();
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) {
    return us[std::min(us.size() - 1, static_cast<size_t>(p * static_cast<double>(us.size())))];
  };
  std::printf(
      "{\"hops\":%d,\"calls\":%d,\"p50_us\":%.0f,\"p99_us\":%.0f,\"per_hop_p50_us\":%.1f}\n", hops,
      calls, pct(0.5), pct(0.99), pct(0.5) / hops);
  return 0;
}
