#include "load/observations.hpp"

#include <cstdio>
#include <random>

namespace fusee::load {

using worker::json;

observations::observations(size_t starts, uint32_t shards)
    : intended(starts), answered(starts), completed(starts), durable_steps(starts),
      timer_seen(starts), signal_sent(starts), signal_answered(starts), cold(starts),
      active_(shards), pending_(shards) {
  for (auto& x : intended)
    x = -1;
  for (auto& x : signal_sent)
    x = -1;
}

void observations::start_sent(uint32_t shard, uint64_t run, int64_t t) {
  if (!track_wakes || shard >= pending_.size()) return;
  std::lock_guard lk{wake_mtx_};
  if (active_[shard] == 0 && pending_[shard].since < 0) pending_[shard] = {t, run};
}

uint64_t observations::invocation_began(const std::vector<uint32_t>& shards) {
  if (!track_wakes) return UINT64_MAX;
  int64_t now = since_t0(clock_type::now());
  uint64_t to_post = UINT64_MAX;
  std::lock_guard lk{wake_mtx_};
  for (auto s : shards) {
    if (s >= pending_.size()) continue;
    active_[s]++;
    auto& p = pending_[s];
    if (p.since >= 0 && to_post == UINT64_MAX) {
      to_post = static_cast<uint64_t>(std::max<int64_t>(0, now - p.since));
      if (p.run < cold.size()) cold[p.run] = 1;
    }
    p.since = -1;
  }
  return to_post;
}

void observations::invocation_ended(uint64_t token, const std::vector<uint32_t>& shards,
                                    uint64_t lease_us) {
  if (!track_wakes) return;
  {
    std::lock_guard lk{wake_mtx_};
    for (auto s : shards)
      if (s < active_.size() && active_[s] > 0) active_[s]--;
  }
  if (token == UINT64_MAX || lease_us == 0) return;  // not a cold wake, or it never leased
  std::lock_guard lk{mtx};
  wake_to_post.record(token);
  wake_server.record(token + lease_us * 1000);
}

void observations::step_ran(uint64_t i, uint32_t k) {
  step_runs++;
  if (i < durable_steps.size() && k < tracked_steps && ((durable_steps[i] >> k) & 1) != 0) {
    reran_after_durable++;
    std::lock_guard lk{mtx};
    if (rerun_example.empty())
      rerun_example = "step s" + std::to_string(k) + " of " + run_id(i) +
                      " ran again after its record was reported durable";
  }
  std::lock_guard lk{mtx};
  executions[{i, k}]++;
}

void observations::step_durable_now(const worker::step_durable& d) {
  auto i = index_of(d.workflow);
  if (!i || *i >= durable_steps.size() || d.step.size() < 2 || d.step[0] != 's') return;
  uint32_t k = static_cast<uint32_t>(std::strtoul(d.step.c_str() + 1, nullptr, 10));
  if (k < tracked_steps) durable_steps[*i] |= uint64_t{1} << k;
  auto ns = static_cast<uint64_t>(std::max<int64_t>(0, d.since_body.count()));
  std::lock_guard lk{mtx};
  step_durable.record(ns);
  interval_step_durable.record(ns);
}

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
      co_await ctx.step(name, [obs, i, k, step_us] {
        spin_for(std::chrono::microseconds(step_us));
        obs->step_ran(i, k);
        return k;
      });
      if (signal && k == 0) {
        std::string go = "go";  // (GCC 12: no string literal inside a co_await expression)
        co_await ctx.wait_for(go, std::chrono::hours(1));
      }
    }
    if (i < obs->completed.size() && obs->completed[i].exchange(1) == 0) {
      obs->done++;
      auto late = obs->since_t0(clock_type::now()) - obs->intended[i].load();
      std::lock_guard<std::mutex> lk{obs->mtx};
      obs->complete_latency.record(static_cast<uint64_t>(std::max<int64_t>(late, 0)));
    }
    co_return json{{"steps", steps}};
  });
  return r;
}

}  // namespace fusee::load
