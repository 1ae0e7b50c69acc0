// A `fusee load` scenario: what to run against the server, for how long, and what must hold at
// the end. Read from TOML (bench/scenarios/*.toml); every key has a default and a range, and a
// mistake is named with the file, line and key, as the server's own configuration does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "client/security.hpp"

namespace fusee::load {

struct scenario {
  // [run]
  std::string name = "unnamed";
  double duration_s = 10;  ///< how long clients start workflows
  double drain_s = 30;     ///< after that, how long to wait for the started ones to finish
  /// host:port of a running server, or a cluster's nodes "a,b,c" (workers and client
  /// connections spread over them in turn); empty: the tool starts one
  std::string server;
  /// TLS and the token of every worker and client of the run (`--token-file`, `--ca-file`, ...;
  /// not scenario keys); default: neither.
  client::security security;
  uint32_t shards = 64;  ///< for the server the tool starts
  /// After the drain, kill -9 the server the tool started and start it again on the same data
  /// dir before the checks: what it acknowledged must have survived.
  bool restart_before_check = false;
  // [workers]: long-lived workers running the real runtime (worker::runtime)
  uint32_t workers = 4;
  uint32_t max_shards = 0;      ///< per worker; 0 = every free shard (the first takes all)
  uint32_t worker_threads = 2;  ///< the workers share this many threads (worker::fleet each)
  // [endpoints]: simulated serverless endpoints the server's invoker wakes (needs a server this
  // tool starts); each invocation runs the real runtime as an invoked worker
  uint32_t endpoints = 0;
  uint32_t endpoint_concurrency = 16;
  uint32_t budget_ms = 5000;
  uint32_t endpoint_max_shards = 0;  ///< shards per invocation, 0 = as many as one may hold
  double fail_rate = 0;              ///< share of POSTs answered 500 without running
  double hang_rate = 0;              ///< share of POSTs not answered until budget + grace passed
  double crash_rate = 0;  ///< share of POSTs whose worker drops its connection mid-invocation
  // [clients]: open loop: starts are sent at their scheduled times whatever the answers do, and
  // latency is measured from the scheduled time (no coordinated omission)
  uint32_t connections = 2;
  double rate = 200;  ///< workflow starts per second, all connections together (closed: a cap)
  /// "open": starts leave at their scheduled times; "closed": each connection keeps `in_flight`
  /// starts unanswered and sends the next when one is answered (latency from the send).
  std::string mode = "open";
  uint32_t in_flight = 8;
  /// Each run waits for a signal "go" after its first step; the client sends it once the start
  /// is answered (the signal's answer latency is reported).
  bool signals = false;
  // [workflow]: what each started workflow does
  uint32_t steps = 3;
  uint32_t step_us = 0;   ///< busy time of each step body
  uint32_t sleep_ms = 0;  ///< a durable sleep after the first half of the steps
  /// Instead of sleep_ms: every run sleeps until this many seconds after the run began (one
  /// instant for all: a timer storm); 0 = off.
  double wake_at_s = 0;
  // [chaos]
  uint32_t server_kills = 0;  ///< kill -9 and restart the server this many times, at random times
  double worker_kill_every_s = 0;  ///< a random worker dies (no DRAIN) this often on average
  uint32_t worker_down_ms = 1000;  ///< and comes back as a new worker after this long
  // [targets]: the run fails (exit 1) when one does not hold
  double max_start_p99_ms = 0;     ///< 0 = no target
  double max_complete_p99_ms = 0;  ///< 0 = no target
  uint64_t max_errors = 0;
  double max_step_p99_over_p50 = 0;      ///< step durable p99 / p50; 0 = no target
  double max_rss_growth = 0;             ///< server RSS within +-this share after warm-up; 0 = none
  double warmup_s = 0;                   ///< samples before this are not held to the RSS target
  double min_wakes_per_s = 0;            ///< median invocations run per second; 0 = no target
  double max_wake_server_p99_ms = 0;     ///< the server's share of a cold wake, p99; 0 = none
  double max_timer_lateness_p99_ms = 0;  ///< 0 = no target
};

/// Reads `file`; nullopt and `*err` naming the file, line and key on a mistake.
std::optional<scenario> load_scenario(const std::string& file, std::string* err);

/// One `--set table.key=value` (a TOML value; a bare word is taken as a string) with the file's
/// ranges and rules; the error text, or empty.
std::string apply_setting(scenario& s, const std::string& setting);

/// The scenario as TOML (the run's JSON report embeds it; docs list the keys from it).
std::string to_toml(const scenario& s);

}  // namespace fusee::load
