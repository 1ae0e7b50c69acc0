// The worker side of the protocol: one connection to the server, the shards it leases, and the
// loop that runs their workflows. Long-lived (serve until stopped, reconnect when the connection
// drops) or invoked (one invocation's shards until they are idle or the budget is near, then
// DRAIN, IDLE and an answer for the POST).
//
// Threading: run() and invoke() run the loop on the calling thread; every workflow and step body
// runs there, except in a cluster: run() then serves each other node on a thread of its own, so
// bodies of workflows on different nodes' shards run concurrently (never two of one shard).
// stop() may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/security.hpp"
#include "protocol/invocation_request.hpp"
#include "worker/shard_runner.hpp"
#include "worker/workflow.hpp"

namespace fusee::worker {

struct worker_options {
  std::string server = "127.0.0.1:7400";
  std::string name = "fusee-worker";
  uint32_t max_shards = 0;  ///< 0: every free shard
  /// APPENDs sent on the connection and not yet durable (at least 1); more records wait in their
  /// shards. The server refuses APPENDs over its `limits.max_appends_in_flight` (16384): half
  /// of that leaves room for APPENDs it still counts after this worker freed their slots (a
  /// revoked shard's, a RELEASE refused at once: append_window.hpp).
  uint32_t max_appends_in_flight = 8192;
  runner_settings runner;
  /// A run's next operation waits for the loop's next turn once this long has passed since the
  /// loop last read its connection, so that a run busy with step after step still learns of a
  /// revoked lease, a lost connection, a cancel or the budget's end before its next step (not
  /// after its last). 0: never.
  uint32_t max_turn_ms = 50;
  uint32_t recover_page_bytes = 4u << 20;
  /// How long to wait for the LEASE answering HELLO.
  uint32_t hello_timeout_ms = 10000;
  /// Invoked: leave once every shard was quiet this long and nothing is due sooner than linger.
  uint32_t quiet_ms = 100;
  uint32_t linger_ms = 250;
  /// Invoked: a checkpoint is written before leaving when at least this many records were
  /// appended since the last one (recovery then replays at most that many).
  uint64_t checkpoint_at_leave = 64;
  /// Fault injection (load tests): an invocation drops its connection this long after its LEASE,
  /// with no DRAIN, as a crashed handler would, and answers 503. 0: never.
  uint32_t drop_invocation_after_ms = 0;
  /// TLS and the token proven before HELLO (docs/protocol.md, "Extension: tokens"); default:
  /// neither. The token is never logged.
  client::security security;
  /// Lines for the operator; stderr when empty.
  std::function<void(const std::string&)> log;
};

/// What an invocation did: the handler's answer to the POST.
struct invocation_outcome {
  unsigned http_status = 200;
  std::string body;  ///< JSON
};

/// An invocation POST checked as PROTOCOL.md §8 says: the `fusee-signature` header (empty when
/// missing) against any of `secrets` within `tolerance_ms` of this clock, then the body. The
/// refusal is the answer to send: 401 for the signature, 400 for the body.
struct verified_invocation {
  std::optional<proto::invocation_request> request;
  invocation_outcome refusal;
};
verified_invocation verify_invocation(std::string_view signature_header, std::string_view body,
                                      const std::vector<std::string>& secrets,
                                      uint64_t tolerance_ms = 300000);

class runtime {
public:
  runtime(const registry& types, worker_options options);
  ~runtime();

  /// Long-lived worker: serves until stop(). Returns 0 after stop(), nonzero when the server
  /// refused the worker (the error is logged).
  int run();
  /// Leaves at the next turn of the loop (any thread).
  void stop() { stop_ = true; }

  /// Runs one verified invocation as its worker.
  invocation_outcome invoke(const proto::invocation_request& request);
  /// The whole endpoint for any HTTP server: verifies the POST, then runs it.
  invocation_outcome serve_post(std::string_view signature_header, std::string_view body,
                                const std::vector<std::string>& secrets,
                                uint64_t tolerance_ms = 300000);

private:
  /// Serves one node until stop(); with `follow_map`, also every other node of its cluster.
  int serve(const worker_options& opts, bool follow_map);

  const registry& types_;
  worker_options options_;
  std::atomic<bool> stop_{false};
};

}  // namespace fusee::worker
