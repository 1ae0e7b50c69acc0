// What a load run observes, shared by the workflow bodies (on the workers' threads), the
// invoked workers (on the simulated endpoints' threads), the clients and the reporter.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "load/latency_histogram.hpp"
#include "worker/shard_runner.hpp"

namespace fusee::load {

using clock_type = std::chrono::steady_clock;

/// Steps of a run whose durability is tracked (bits of a word); later steps are not checked.
constexpr uint32_t tracked_steps = 64;

struct observations {
  observations(size_t starts, uint32_t shards);

  // -- the schedule ---------------------------------------------------------------------------
  /// When the schedule starts, in ns of the steady clock (atomic: the workers' threads read it).
  std::atomic<int64_t> t0_ns{0};
  clock_type::time_point t0() const {
    return clock_type::time_point(std::chrono::nanoseconds(t0_ns.load()));
  }
  void set_t0(clock_type::time_point t) {
    t0_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  int64_t since_t0(clock_type::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0()).count();
  }

  // -- per run (index i) ------------------------------------------------------------------------
  std::vector<std::atomic<int64_t>> intended;   ///< ns after t0 start i was sent for; -1 unsent
  std::vector<std::atomic<uint8_t>> answered;   ///< 0 no answer, 1 ok, 2 refused
  std::vector<std::atomic<uint8_t>> completed;  ///< the run's code reached its end
  std::vector<std::atomic<uint8_t>> counted;    ///< counted in `done` (answered ok, completed)
  std::vector<std::atomic<uint64_t>> durable_steps;   ///< bit k: step s<k>'s record is durable
  std::vector<std::atomic<uint64_t>> durable_epoch;   ///< the newest lease that reported one
  std::vector<std::atomic<uint8_t>> timer_seen;       ///< its timer's lateness was recorded
  std::vector<std::atomic<int64_t>> signal_sent;      ///< ns after t0; -1: not sent
  std::vector<std::atomic<uint8_t>> signal_answered;  ///< 0 no answer, 1 ok, 2 refused
  std::vector<std::atomic<uint8_t>> cold;             ///< its start woke an endpoint

  // -- counts ---------------------------------------------------------------------------------
  /// `done`: runs whose start was answered ok (`ok`) and whose code reached its end, so never
  /// more than `ok`: a run can end before its start's answer reaches the client.
  std::atomic<uint64_t> sent{0}, ok{0}, refused{0}, done{0}, step_runs{0};
  std::atomic<uint64_t> signals_sent{0}, signals_ok{0}, signals_refused{0};
  /// Starts and signals sent again because the answer was "holder lost: it may have run" (in
  /// doubt) or "parked too long" (no holder took the shard in time).
  std::atomic<uint64_t> starts_resent_in_doubt{0}, starts_resent_parked{0};
  std::atomic<uint64_t> signals_resent_in_doubt{0}, signals_resent_parked{0};
  /// Resent signals the run had taken already (answered "duplicate" by its key).
  std::atomic<uint64_t> signals_duplicate{0};
  /// Step bodies that ran although their step's record had been reported durable, under a lease
  /// at least as new as the one that reported it: the record was lost (a recovery did not see
  /// it). Never allowed.
  std::atomic<uint64_t> reran_after_durable{0};
  /// The same under an older lease: a holder that lost its lease and did not know yet (a stalled
  /// worker) ran a body the new holder had made durable. Fencing keeps its records out; the body
  /// itself ran (at-least-once for side effects of a stalled holder), so it is reported.
  std::atomic<uint64_t> reran_by_deposed{0};

  std::mutex mtx;  ///< guards what follows
  latency_histogram start_latency, complete_latency, step_durable, timer_lateness, signal_latency,
      wake_to_post, wake_server, wake_total;
  /// Since the last timeline sample.
  latency_histogram interval_start_latency, interval_step_durable;
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> executions;  ///< (run, step) -> body runs
  std::map<std::string, uint64_t> refusals;                      ///< reason -> count
  std::string rerun_example;

  /// Run i's start was answered ok / its code reached its end (each once per run; any thread).
  void start_answered_ok(uint64_t i);
  /// True the first time for run i (its completion latency is recorded then).
  bool run_completed(uint64_t i);

  // -- cold wakes (runs with no long-lived worker) ----------------------------------------------
  /// Start `run` was sent to `shard` at `t` (ns after t0).
  void start_sent(uint32_t shard, uint64_t run, int64_t t);
  /// An invocation whose POST arrived at `arrived` begins on `shards`: a token for
  /// invocation_ended().
  uint64_t invocation_began(const std::vector<uint32_t>& shards, clock_type::time_point arrived);
  void invocation_ended(uint64_t token, const std::vector<uint32_t>& shards, uint64_t lease_us);
  bool track_wakes = false;

  /// What the step body of (run i, step k) records, run under lease `epoch`; the runner's
  /// on_step_durable.
  void step_ran(uint64_t i, uint32_t k, uint64_t epoch);
  void step_durable_now(const worker::step_durable& d);

private:
  std::mutex wake_mtx_;
  std::vector<uint32_t> active_;  ///< invocations running per shard
  struct pending {
    int64_t since = -1;  ///< the first start sent to the shard while it had no invocation
    uint64_t run = 0;
  };
  std::vector<pending> pending_;
};

/// The `top` commonest reasons of `refusals` as "N x reason" lines, most first (ties by reason),
/// and a last line counting the reasons left out.
std::vector<std::string> commonest_refusals(const std::map<std::string, uint64_t>& refusals,
                                            size_t top);

}  // namespace fusee::load
