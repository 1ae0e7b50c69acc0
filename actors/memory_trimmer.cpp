#include "actors/memory_trimmer.hpp"

#include <malloc.h>

#include <chrono>
#include <string>
#include <system_error>

#include "logging/logging.hpp"

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
    : trim_(trim ? std::move(trim) : std::function<void()>{trim_heap}) {}

proto::result<std::unique_ptr<memory_trimmer>> memory_trimmer::start(std::function<void()> trim) {
  std::unique_ptr<memory_trimmer> t{new memory_trimmer(std::move(trim))};
  try {
    t->thread_ = std::thread([raw = t.get()] { raw->run(); });
  } catch (const std::system_error& e) {
    return proto::error{proto::err_code::io,
                        std::string{"cannot start the memory trimmer's thread: "} + e.what()};
  }
  return t;
}

memory_trimmer::~memory_trimmer() {
  {
    std::lock_guard<std::mutex> lk{mtx_};
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
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
