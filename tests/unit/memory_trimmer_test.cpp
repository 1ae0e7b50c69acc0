// The trimmer's thread: asking never waits for a trim, and a trim asked for while one runs is not
// lost.
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "actors/memory_trimmer.hpp"

using fusee::server::memory_trimmer;

namespace {

/// Waits (up to 10 s) until `t` has finished `n` trims; true if it did.
bool await_trims(const memory_trimmer& t, uint64_t n) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (t.trims() < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polling a condition
  return t.trims() >= n;
}

}  // namespace

TEST_CASE("asking for a trim never waits for one going on, and a trim asked for during one follows "
          "it") {
  std::mutex mtx;
  std::condition_variable cv;
  int started = 0;
  bool released = false;
  auto started_trimmer = memory_trimmer::start([&] {
    std::unique_lock<std::mutex> lk{mtx};
    started++;
    cv.notify_all();
    cv.wait(lk, [&] { return released; });  // the first trim lasts until the test lets it end
  });
  REQUIRE(started_trimmer);
  auto& t = **started_trimmer;
  t.request();
  {
    std::unique_lock<std::mutex> lk{mtx};
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return started == 1; }));
  }
  // The trim is going on: these return at once (were they to wait for it, nothing would end it).
  t.request();
  t.request();
  t.request();
  CHECK(t.trims() == 0);
  {
    std::lock_guard<std::mutex> lk{mtx};
    released = true;
  }
  cv.notify_all();
  {
    std::unique_lock<std::mutex> lk{mtx};
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return started == 2; }));
  }
  CHECK(await_trims(t, 2));
  CHECK(t.trims() == 2);
  // And later requests are served as well.
  t.request();
  {
    std::unique_lock<std::mutex> lk{mtx};
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return started == 3; }));
  }
}

TEST_CASE("the default trim hands memory back without failing, and the trimmer stops cleanly") {
  auto started_trimmer = memory_trimmer::start();
  REQUIRE(started_trimmer);
  auto& t = **started_trimmer;
  t.request();
  CHECK(await_trims(t, 1));
  CHECK(t.trims() == 1);
}
