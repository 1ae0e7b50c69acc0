// A simulated serverless endpoint for `fusee load`: an HTTP server on loopback that the server's
// invoker POSTs to. Each POST is verified and run by the real runtime as an invoked worker
// (worker::runtime::invoke after verify_invocation), unless the dice say to fail it (HTTP 500),
// hang (no answer until the invocation's budget and grace are over) or crash (the worker drops
// its connection to the server mid-invocation).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "protocol/splitmix64.hpp"
#include "worker/shard_runner.hpp"
#include "worker/workflow.hpp"

namespace fusee::app {
class http_server;
}

namespace fusee::load {

struct endpoint_behaviour {
  double fail_rate = 0;  ///< answer 500 without running
  double hang_rate = 0;  ///< answer nothing until hang_ms have passed (then 504)
  uint32_t hang_ms = 0;
  double crash_rate = 0;  ///< the worker drops its connection after 0 to crash_within_ms
  uint32_t crash_within_ms = 1000;
  std::string secret;
  /// Given to the invoked workers' runners (runner_settings::on_step_durable).
  std::function<void(const worker::step_durable&)> on_step_durable;
  /// A verified POST that `arrived` is about to run on `shards` (returns a token) / was answered
  /// (with that token); lease_us is the server's HELLO -> LEASE time its worker saw (0 when it
  /// did not get that far). Any thread.
  std::function<uint64_t(const std::vector<uint32_t>& shards,
                         std::chrono::steady_clock::time_point arrived)>
      on_run;
  std::function<void(uint64_t token, const std::vector<uint32_t>& shards, uint64_t lease_us)>
      on_ran;
};

class sim_endpoint {
public:
  /// Serves on 127.0.0.1 (a free port); `types` must outlive it. nullptr and `*err` on failure.
  static std::unique_ptr<sim_endpoint> start(const worker::registry& types,
                                             endpoint_behaviour behaviour, uint64_t seed,
                                             std::string* err);
  ~sim_endpoint();
  uint16_t port() const;
  /// Ends the hangs in progress (they answer 504 at once) and stops serving.
  void stop();

  /// POSTs; answered 500 / left hanging on purpose; run by the runtime (ran), of which `crashed`
  /// dropped their connection on purpose before they were done.
  std::atomic<uint64_t> posts{0}, failed{0}, hung{0}, crashed{0}, ran{0};
  std::atomic<uint64_t> in_flight{0};  ///< POSTs being answered now

private:
  sim_endpoint() = default;
  bool roll(double rate);
  uint64_t next_random();

  const worker::registry* types_ = nullptr;
  endpoint_behaviour b_;
  std::unique_ptr<app::http_server> http_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stopping_ = false;
  proto::splitmix64 rng_{0};  ///< guarded by mtx_
};

}  // namespace fusee::load
