// Hands the heap's free memory back to the system (malloc_trim) on a thread of its own. After a
// timer storm a million wake records retire over about two minutes, and each trim took the
// directory 30-280 ms when it ran on the directory's thread (docs/benchmarks.md).
//
// Threading: request() from any thread; it never waits for a trim. glibc locks each arena while
// it trims that arena, so a thread allocating from it may still wait that long. The destructor
// waits for a trim going on (the directory's end, at shutdown, may wait that long once).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "protocol/result.hpp"

namespace fusee::server {

class memory_trimmer {
public:
  /// Starts the thread. `trim` is what a trim does (tests pass their own); by default
  /// malloc_trim(0), logged at debug with its duration. Fails if the thread cannot be started.
  static proto::result<std::unique_ptr<memory_trimmer>> start(std::function<void()> trim = {});
  /// Waits for a trim going on; a trim only asked for is dropped.
  ~memory_trimmer();
  memory_trimmer(const memory_trimmer&) = delete;
  memory_trimmer& operator=(const memory_trimmer&) = delete;

  /// Asks for a trim. Asked while one runs, one more trim follows it, however often it is asked.
  void request();
  /// Trims finished so far.
  uint64_t trims() const { return trims_.load(std::memory_order_acquire); }

private:
  explicit memory_trimmer(std::function<void()> trim);
  void run();
  std::function<void()> trim_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool wanted_ = false;
  bool stopping_ = false;
  std::atomic<uint64_t> trims_{0};
  std::thread thread_;
};

}  // namespace fusee::server
