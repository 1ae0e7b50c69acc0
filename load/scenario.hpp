// A `fusee load` scenario: what to run against the server, for how long, and what must hold at
// the end. Read from TOML (bench/scenarios/*.toml); every key has a default and a range, and a
// mistake is named with the file, line and key, as the server's own configuration does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace fusee::load {

struct scenario {
  // [run]
  std::string name = "unnamed";
  double duration_s = 10;  ///< how long clients start workflows
  double drain_s = 30;     ///< after that, how long to wait for the started ones to finish
  std::string server;      ///< host:port of a running server; empty: the tool starts one
  uint32_t shards = 64;    ///< for the server the tool starts
  /// After the drain, kill -9 the server the tool started and start it again on the same data
  /// dir before the checks: what it acknowledged must have survived.
  bool restart_before_check = false;
  // [workers]: long-lived workers running the real runtime (worker::runtime)
  uint32_t workers = 4;
  uint32_t max_shards = 0;  ///< per worker; 0 = every free shard (the first takes all)
  // [endpoints]: simulated serverless endpoints the server's invoker wakes (needs a server this
  // tool starts); each invocation runs the real runtime as an invoked worker
  uint32_t endpoints = 0;
  uint32_t endpoint_concurrency = 16;
  uint32_t budget_ms = 5000;
  uint32_t endpoint_max_shards = 0;  ///< shards per invocation, 0 = no limit
  double fail_rate = 0;              ///< share of POSTs answered 500 without running
  double hang_rate = 0;              ///< share of POSTs not answered until budget + grace passed
  // [clients]: open loop: starts are sent at their scheduled times whatever the answers do, and
  // latency is measured from the scheduled time (no coordinated omission)
  uint32_t connections = 2;
  double rate = 200;  ///< workflow starts per second, all connections together
  // [workflow]: what each started workflow does
  uint32_t steps = 3;
  uint32_t step_us = 0;   ///< busy time of each step body
  uint32_t sleep_ms = 0;  ///< a durable sleep after the first half of the steps
  // [chaos]
  uint32_t server_kills = 0;  ///< kill -9 and restart the server this many times during the run
  // [targets]: the run fails (exit 1) when one does not hold
  double max_start_p99_ms = 0;     ///< 0 = no target
  double max_complete_p99_ms = 0;  ///< 0 = no target
  uint64_t max_errors = 0;
};

/// Reads `file`; nullopt and `*err` naming the file, line and key on a mistake.
std::optional<scenario> load_scenario(const std::string& file, std::string* err);

/// The scenario as TOML (the run's JSON report embeds it; docs list the keys from it).
std::string to_toml(const scenario& s);

}  // namespace fusee::load
