#include "load/load_workflow.hpp"

#include <chrono>
#include <cstdio>
#include <random>

namespace fusee::load {

using worker::json;

namespace {

std::string run_prefix() {
  static const std::string p = [] {
    std::random_device rd;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "load-%08x-", static_cast<unsigned>(rd()));
    return std::string(buf);
  }();
  return p;
}

void spin_for(std::chrono::microseconds d) {
  auto until = clock_type::now() + d;
  while (clock_type::now() < until) {
  }
}

uint64_t unix_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

std::string run_id(uint64_t i) {
  return run_prefix() + std::to_string(i);
}

std::optional<uint64_t> index_of(const std::string& id) {
  auto p = run_prefix();
  if (id.compare(0, p.size(), p) != 0) return std::nullopt;
  return std::stoull(id.substr(p.size()));
}

worker::registry workflows(observations* obs) {
  worker::registry r;
  r.add("load", [obs](worker::context& ctx, json input) -> worker::task<json> {
    uint64_t i = index_of(ctx.id()).value_or(UINT64_MAX);
    auto steps = input.value("steps", 3u);
    auto step_us = input.value("step_us", 0u);
    auto sleep_ms = input.value("sleep_ms", uint64_t{0});
    auto wake_at_ms = input.value("wake_at_ms", uint64_t{0});
    bool signal = input.value("signal", false);
    for (uint32_t k = 0; k < steps; ++k) {
      if ((sleep_ms > 0 || wake_at_ms > 0) && k == steps / 2) {
        // The due time from the journaled clock, so a replay computes the same one.
        auto t = co_await ctx.now();
        auto now_ms = static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count());
        uint64_t due = sleep_ms > 0 ? now_ms + sleep_ms : wake_at_ms;
        co_await ctx.sleep(std::chrono::milliseconds(due > now_ms ? due - now_ms : 0));
        if (i < obs->timer_seen.size() && obs->timer_seen[i].exchange(1) == 0) {
          auto late = static_cast<int64_t>(unix_ns()) - static_cast<int64_t>(due * 1000000);
          std::lock_guard<std::mutex> lk{obs->mtx};
          obs->timer_lateness.record(static_cast<uint64_t>(std::max<int64_t>(late, 0)));
        }
      }
      auto name = "s" + std::to_string(k);
      uint64_t epoch = ctx.lease_epoch();
      co_await ctx.step(name, [obs, i, k, step_us, epoch] {
        spin_for(std::chrono::microseconds(step_us));
        obs->step_ran(i, k, epoch);
        return k;
      });
      if (signal && k == 0) {
        std::string go = "go";  // (GCC 12: no string literal inside a co_await expression)
        co_await ctx.wait_for(go, std::chrono::hours(1));
      }
    }
    if (i < obs->completed.size() && obs->run_completed(i)) {
      auto late = obs->since_t0(clock_type::now()) - obs->intended[i].load();
      std::lock_guard<std::mutex> lk{obs->mtx};
      obs->complete_latency.record(static_cast<uint64_t>(std::max<int64_t>(late, 0)));
    }
    co_return json{{"steps", steps}};
  });
  return r;
}

}  // namespace fusee::load
