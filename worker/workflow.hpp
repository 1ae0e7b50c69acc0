// What workflow code sees: the context of a run and its journaled operations, the options of a
// step, the errors a workflow can throw or catch, and the registry of workflow types.
//
// Contract of every operation: call it and co_await the result at once (one operation at a time
// per run). A replay returns the journaled result without running anything; code that asks for
// a different operation than the journal holds at that point stops the run with an error naming
// both. Step bodies run on the worker's thread and should not block for long.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/task.hpp"

namespace fusee::worker {

using json = nlohmann::json;

/// Throw from a step body for an error no retry can fix: the step fails at once.
struct permanent_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Thrown into the workflow when a step failed for good (after its attempts, or permanently).
struct step_failed : std::runtime_error {
  step_failed(std::string step, const std::string& message)
      : std::runtime_error("step '" + step + "' failed: " + message), step_name(std::move(step)),
        reason(message) {}
  std::string step_name;
  std::string reason;
};

/// How a step retries a body that threw. The delay before attempt n+1 is
/// min(max_backoff, backoff * multiplier^(n-1)), scaled by a random factor in [1-jitter, 1].
struct step_options {
  uint32_t attempts = 3;  ///< in all, the first included
  std::chrono::milliseconds backoff{100};
  std::chrono::milliseconds max_backoff{10000};
  double multiplier = 2.0;
  double jitter = 0.2;
  /// Which errors retry (permanent_error never does). Empty: every other std::exception.
  std::function<bool(const std::exception&)> retry_if;
};

class workflow_run;  // the runtime's state of one run (shard_runner.cpp)

/// The result of an operation: co_await it. Ready at once for replays, steps that ran, and
/// now()/random(); suspends for sleeps, waits and step retries, and any operation while the
/// shard has max_records_ahead records not yet durable.
template <class T>
class [[nodiscard]] op_awaitable {
public:
  op_awaitable(workflow_run* run, bool ready) : run_(run), ready_(ready) {}
  bool await_ready() const noexcept { return ready_; }
  void await_suspend(std::coroutine_handle<> h) noexcept;
  T await_resume();

private:
  workflow_run* run_;
  bool ready_;
};

class context {
public:
  explicit context(workflow_run* run) : run_(run) {}
  const std::string& id() const;
  const std::string& type() const;
  /// The epoch of the shard's lease this code runs under. It grows with every new holder, so a
  /// step can hand it to another system as a fencing token (refuse writes with an older one).
  uint64_t lease_epoch() const;

  /// Runs `body` once (or after a replay, not at all) and journals what it returned (a value
  /// convertible to json, or nothing). Throws step_failed into the workflow when it fails for
  /// good.
  template <class F>
  op_awaitable<json> step(std::string name, F body, step_options options = {}) {
    return step_impl(
        std::move(name),
        [body = std::move(body)]() -> json {
          if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
            body();
            return nullptr;
          } else {
            return json(body());
          }
        },
        std::move(options));
  }
  /// A durable timer: the run sleeps (and an invoked worker may leave) until it is due.
  op_awaitable<void> sleep(std::chrono::milliseconds duration);
  /// The next signal `name` sent to this run (or already waiting in its inbox); nullopt when
  /// `timeout` passes first.
  op_awaitable<std::optional<json>> wait_for(std::string name, std::chrono::milliseconds timeout);
  /// Sends signal `name` to another run, on any shard, exactly once (through the server's relay).
  op_awaitable<void> send(std::string workflow_id, std::string name, json payload);
  /// Starts run `id` of `type` (on its own shard); an existing `id` is left as it is. Throws
  /// std::invalid_argument, starting nothing, for an id the HTTP API could not reach (not 1 to
  /// 256 bytes of UTF-8 without control characters).
  op_awaitable<void> start_child(std::string type, std::string id, json input);
  /// The time, journaled: a replay sees the same.
  op_awaitable<std::chrono::system_clock::time_point> now();
  /// A random number, journaled.
  op_awaitable<uint64_t> random();

private:
  op_awaitable<json> step_impl(std::string name, std::function<json()> body, step_options options);
  workflow_run* run_;
};

using workflow_fn = std::function<task<json>(context&, json input)>;

/// Workflow types by name. Filled before the runtime starts; read-only afterwards.
class registry {
public:
  registry& add(std::string type, workflow_fn fn) {
    types_[std::move(type)] = std::move(fn);
    return *this;
  }
  const workflow_fn* find(const std::string& type) const {
    auto it = types_.find(type);
    return it == types_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& [n, f] : types_)
      out.push_back(n);
    return out;
  }
  /// "a, b, c" (or "none").
  std::string list() const;

private:
  std::map<std::string, workflow_fn> types_;
};

namespace detail_ops {
void park(workflow_run* w, std::coroutine_handle<> h) noexcept;
/// The finished operation's (ok, value); rethrows its error.
std::pair<bool, json> take(workflow_run* w);
}  // namespace detail_ops

template <class T>
void op_awaitable<T>::await_suspend(std::coroutine_handle<> h) noexcept {
  detail_ops::park(run_, h);
}

template <class T>
T op_awaitable<T>::await_resume() {
  auto [ok, v] = detail_ops::take(run_);
  if constexpr (std::is_void_v<T>) {
    (void)ok;
  } else if constexpr (std::is_same_v<T, json>) {
    return std::move(v);
  } else if constexpr (std::is_same_v<T, std::optional<json>>) {
    if (!ok) return std::nullopt;
    return std::optional<json>(std::move(v));
  } else if constexpr (std::is_same_v<T, std::chrono::system_clock::time_point>) {
    return std::chrono::system_clock::time_point(std::chrono::milliseconds(v.get<int64_t>()));
  } else {
    return v.get<T>();
  }
}

}  // namespace fusee::worker
