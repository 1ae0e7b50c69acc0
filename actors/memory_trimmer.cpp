#include "actors/memory_trimmer.hpp"

#include <malloc.h>

#include <chrono>

#include "actors/logging.hpp"

namespace fusee::server {

namespace {

void trim_heap() {
  auto t0 = std::chrono::steady_clock::now();
  ::malloc_trim(0);
  std::chrono::duration<double, std::milli> took = std::chrono::steady_clock::now() - t0;
  spdlog::debug("memory returned to the system trim_ms={:.1f}", took.count());
}

}  // namespace

memory_trimmer::memory_trimmer(std::function<void()> trim)
    : trim_(trim ? std::move(trim) : std::function<void()>{trim_heap}), thread_([this] { run(); }) {
}

memory_trimmer::~memory_trimmer() {
  {
    std::lock_guard<std::mutex> lk{mtx_};
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void memory_trimmer::request() {
  {
    std::lock_guard<std::mutex> lk{mtx_};
    wanted_ = true;
  }
  cv_.notify_one();
}

void memory_trimmer::run() {
  std::unique_lock<std::mutex> lk{mtx_};
  for (;;) {
    cv_.wait(lk, [&] { return wanted_ || stopping_; });
    if (stopping_) return;
    wanted_ = false;
    lk.unlock();
    trim_();
    trims_.fetch_add(1, std::memory_order_release);
    lk.lock();
  }
}

}  // namespace fusee::server
