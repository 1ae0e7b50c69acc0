// The machine's stalls, without fusee: one thread reads the monotonic clock in a tight loop for
// SECONDS and counts the gaps between two reads, which only happen when the thread does not run
// (the vCPU is preempted by the host, or the guest kernel takes the CPU). Nothing here sleeps or
// waits, so a gap of milliseconds is the machine's, not a wake-up's: the anchor for a p99 of a
// few milliseconds over a few hundred samples (docs/benchmarks.md, "Seventh session").
//   stall_floor [seconds]
// Prints one JSON line: the gaps above 200 us, 1 ms and 3 ms, and the longest, in microseconds.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  double seconds = argc > 1 ? std::stod(argv[1]) : 5;
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto end =
      start + std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(seconds));
  auto last = start;
  uint64_t over_200us = 0, over_1ms = 0, over_3ms = 0;
  clock::duration longest{};
  for (auto now = clock::now(); now < end; now = clock::now()) {
    auto gap = now - last;
    last = now;
    if (gap > std::chrono::microseconds(200)) ++over_200us;
    if (gap > std::chrono::milliseconds(1)) ++over_1ms;
    if (gap > std::chrono::milliseconds(3)) ++over_3ms;
    if (gap > longest) longest = gap;
  }
  std::printf("{\"seconds\":%.1f,\"gaps_over_200us\":%llu,\"gaps_over_1ms\":%llu,"
              "\"gaps_over_3ms\":%llu,\"longest_us\":%.0f}\n",
              seconds, static_cast<unsigned long long>(over_200us),
              static_cast<unsigned long long>(over_1ms), static_cast<unsigned long long>(over_3ms),
              std::chrono::duration<double, std::micro>(longest).count());
  return 0;
}
