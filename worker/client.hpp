// The workflow client: start, signal, result, describe and cancel over the protocol (CLIENT_HELLO
// and CALL), for programs and the `fusee start | signal | result | describe | cancel` commands.
// Blocking, no threads; one call at a time, or many in flight with send_call / next_answer.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "client/connection.hpp"
#include "protocol/result.hpp"
#include "worker/workflow.hpp"

namespace fusee::worker {

/// A CALL's answer: the status (PROTOCOL.md §4, CALL_RESULT) and the JSON body.
struct call_answer {
  proto::call_status status = proto::call_status::ok;
  json body;
  bool ok() const { return status == proto::call_status::ok; }
  /// The "code" of an application error ("not_found", "conflict", ...), else the server's for
  /// its status ("no_holder", "holder_lost", "bad_request", "failed"), empty for ok.
  std::string code() const;
  /// The "error" text of a refusal, empty for ok.
  std::string error() const;
};

class workflow_client {
public:
  /// Connects to host:port with CLIENT_HELLO, after TLS and AUTH if `sec` asks for them.
  static proto::result<workflow_client> connect(const std::string& server,
                                                const std::string& name = "fusee-client",
                                                const client::security& sec = {});

  proto::result<call_answer> start(const std::string& type, const std::string& id,
                                   const json& input, uint32_t park_ms = 0);
  /// With a `key`, a retry of a signal the run took (say after an answer that never came) is
  /// answered `"duplicate": true` and delivers nothing again.
  proto::result<call_answer> signal(const std::string& id, const std::string& name,
                                    const json& payload, uint32_t park_ms = 0,
                                    const std::string& key = {});
  /// The run's status and result; waits up to wait_ms for it to end.
  proto::result<call_answer> result(const std::string& id, uint64_t wait_ms = 0,
                                    uint32_t park_ms = 0);
  proto::result<call_answer> describe(const std::string& id, uint32_t park_ms = 0);
  proto::result<call_answer> cancel(const std::string& id, uint32_t park_ms = 0);
  /// Any method on the shard of workflow `id` (the arguments name it).
  proto::result<call_answer> call(const std::string& id, const std::string& method,
                                  const std::string& type, const json& args, uint32_t park_ms,
                                  std::chrono::milliseconds extra_wait = std::chrono::seconds(60));

  /// Pipelining: sends the CALL and returns its request id at once; next_answer() gives the
  /// answers in the order they come.
  proto::result<uint64_t> send_call(const std::string& id, const std::string& method,
                                    const std::string& type, const json& args, uint32_t park_ms);
  struct numbered_answer {
    uint64_t request = 0;  ///< 0: an ERR about the connection, not one call
    call_answer answer;
    std::optional<proto::error> refused;  ///< the server answered ERR instead
  };
  /// The next CALL_RESULT or ERR within `timeout`; an error when none came or the connection
  /// is gone.
  proto::result<numbered_answer> next_answer(std::chrono::milliseconds timeout);
  /// True when the last next_answer() failed because nothing came in time: the connection is
  /// still usable (a frame half read waits for the next call).
  bool timed_out() const { return conn_.timed_out(); }

  uint32_t shard_count() const { return shard_count_; }

private:
  client::connection conn_;
  uint32_t shard_count_ = 1;
  uint64_t next_id_ = 2;
};

}  // namespace fusee::worker
