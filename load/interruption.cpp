#include "load/interruption.hpp"

#include <atomic>
#include <csignal>

namespace fusee::load {

namespace {
std::atomic<int> caught{0};

extern "C" void on_interruption(int sig) {
  int none = 0;
  caught.compare_exchange_strong(none, sig, std::memory_order_relaxed);
  std::signal(SIGINT, SIG_DFL);  // the next one of either acts as usual (async-signal-safe)
  std::signal(SIGTERM, SIG_DFL);
}
}  // namespace

void catch_interruptions() {
  struct sigaction sa {};
  sa.sa_handler = on_interruption;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int interrupted() {
  return caught.load(std::memory_order_relaxed);
}

}  // namespace fusee::load
