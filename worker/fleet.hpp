// Many long-lived workers on one thread: each has its own connection, leases and shard runners
// (a session, exactly what runtime::run() drives), and one epoll loop serves them all. For load
// generators and tests that need thousands of workers; an application runs runtime::run().
//
// Threading: run() drives every worker on the calling thread (workflow bodies run there, so a
// long body delays the others). stop(), kill() and the counters are safe from any thread.
// Writes block: a server that stops reading stalls the whole fleet, as it would a worker.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "worker/runtime.hpp"

namespace fusee::worker {

class fleet {
public:
  /// One worker per entry of `workers` (their `server`, `name`, `max_shards`, settings).
  fleet(const registry& types, std::vector<worker_options> workers);
  ~fleet();
  fleet(const fleet&) = delete;
  fleet& operator=(const fleet&) = delete;

  /// Serves until stop(), reconnecting workers whose connection drops (with backoff); then
  /// DRAINs and checkpoints every worker, as runtime::run() does when stopped.
  void run();
  void stop() { stop_ = true; }

  /// Worker `i` (of size()) dies as a crashed process would: its connection is closed with no
  /// DRAIN and nothing more sent, its runners' state is dropped; after `down_for` it connects
  /// again as a new worker and recovers what it is granted. Ignored while it is down or still
  /// connecting.
  void kill(size_t i, std::chrono::milliseconds down_for);

  size_t size() const { return count_; }
  /// Workers connected now.
  size_t connected() const { return connected_; }
  /// Kills carried out, connections lost (not by kill()), and connects that failed.
  uint64_t kills() const { return kills_; }
  uint64_t losses() const { return losses_; }
  uint64_t failed_connects() const { return failed_connects_; }

private:
  struct slot;
  void connect(slot& w);
  void failed(slot& w);  ///< a connect that did not get its LEASE: retried after a backoff
  void leased(slot& w);
  void down(slot& w, std::chrono::milliseconds for_at_least);

  const registry& types_;
  std::vector<std::unique_ptr<slot>> slots_;
  size_t count_ = 0;
  int epoll_ = -1;  ///< the connected workers' sockets (run() makes it)
  std::atomic<bool> stop_{false};
  std::atomic<size_t> connected_{0};
  std::atomic<uint64_t> kills_{0}, losses_{0}, failed_connects_{0};
  std::mutex kill_mu_;  // guards kill_requests_
  std::vector<std::pair<size_t, std::chrono::milliseconds>> kill_requests_;
};

}  // namespace fusee::worker
