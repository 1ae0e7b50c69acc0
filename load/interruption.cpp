#include "load/interruption.hpp"

#include <atomic>
#include <csignal>

namespace fusee::load {

namespace {
std::atomic<int> caught{0};

extern "C" void on_interruption(int sig) {
  caught.store(sig, std::memory_order_relaxed);
}
}  // namespace

void catch_interruptions() {
  struct sigaction sa {};
  sa.sa_handler = on_interruption;
  sa.sa_flags = SA_RESETHAND;  // the next one takes the default action
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int interrupted() {
  return caught.load(std::memory_order_relaxed);
}

}  // namespace fusee::load
