#include "app/demo_workflows.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unistd.h>

#include "protocol/unix_time.hpp"

namespace fusee::app {

namespace {

using worker::context;
using worker::json;
using worker::task;
using namespace std::chrono_literals;

/// When FUSEE_TRACE_FILE is set, every step body appends "<workflow> <step> <value>" to it (one
/// write with O_APPEND, so lines from several processes do not interleave): the tests read it
/// to prove that no completed step ran twice.
void trace(const std::string& workflow, const std::string& step, const json& value) {
  static const char* path = std::getenv("FUSEE_TRACE_FILE");
  if (!path || !*path) return;
  std::string line = workflow + " " + step + " " + value.dump() + "\n";
  int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  [[maybe_unused]] auto n = ::write(fd, line.data(), line.size());
  ::close(fd);
}

template <class T>
T get_or(const json& input, const char* key, T fallback) {
  if (!input.is_object()) return fallback;
  auto it = input.find(key);
  if (it == input.end() || it->is_null()) return fallback;
  // An integer from 1e12 or "3" is no number the run can use: it fails, naming the input.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    double d = it->is_number() ? it->get<double>() : std::nan("");
    if (!(d >= double(std::numeric_limits<T>::min()) &&
          d <= double(std::numeric_limits<T>::max()) && d == std::floor(d)))
      throw worker::permanent_error(std::string{"input \""} + key + "\" must be an integer from " +
                                    std::to_string(std::numeric_limits<T>::min()) + " to " +
                                    std::to_string(std::numeric_limits<T>::max()) + ", not " +
                                    it->dump());
  }
  return it->get<T>();
}

/// Simulated payment provider: fails the first `fail_times` attempts of each order (a process
/// counter, as a flaky remote service would).
json charge_card(const std::string& order, double total, int fail_times) {
  static std::mutex mu;
  static std::map<std::string, int> attempts;
  std::lock_guard lock(mu);
  int n = ++attempts[order];
  if (n <= fail_times)
    throw std::runtime_error("payment provider unavailable (attempt " + std::to_string(n) + ")");
  return json{{"charged", total},
              {"transaction", "tx-" + order + "-" + std::to_string(proto::unix_ms())}};
}

/// Order checkout: quote, charge (retried with backoff), wait for a `review` signal, then ship
/// or refund. Input: {"order": "...", "amount": 40.0, "review_timeout_ms": 3600000,
/// "fail_charge_times": 0}.
task<json> checkout(context& ctx, json input) {
  std::string order = get_or<std::string>(input, "order", ctx.id());
  double amount = get_or<double>(input, "amount", 0.0);
  if (amount <= 0) throw worker::permanent_error("\"amount\" must be a positive number");
  int fail_times = get_or<int>(input, "fail_charge_times", 0);
  auto timeout = std::chrono::milliseconds(get_or<int64_t>(input, "review_timeout_ms", 3600000));

  json quote = co_await ctx.step("quote", [&] {
    json q{{"amount", amount}, {"tax", amount * 0.2}, {"total", amount * 1.2}};
    trace(ctx.id(), "quote", q);
    return q;
  });
  double total = quote["total"].get<double>();
  worker::step_options retry;
  retry.attempts = 5;
  retry.backoff = 50ms;
  std::string charge_step = "charge";
  json charge = co_await ctx.step(
      charge_step,
      [&] {
        auto c = charge_card(order, total, fail_times);
        trace(ctx.id(), "charge", c);
        return c;
      },
      retry);
  auto review = co_await ctx.wait_for("review", timeout);
  bool approved = review && review->is_object() && get_or<bool>(*review, "approved", false);
  if (approved) {
    json shipped = co_await ctx.step("ship", [&] {
      json s{{"carrier", "demo-post"}, {"tracking", "TRK-" + order}};
      trace(ctx.id(), "ship", s);
      return s;
    });
    co_return json{{"order", order},
                   {"status", "shipped"},
                   {"total", total},
                   {"transaction", charge["transaction"]},
                   {"shipment", shipped}};
  }
  json refund = co_await ctx.step("refund", [&] {
    json r{{"refunded", total}};
    trace(ctx.id(), "refund", r);
    return r;
  });
  co_return json{{"order", order},
                 {"status", "refunded"},
                 {"reason", review ? "review rejected" : "no review in time"},
                 {"refund", refund}};
}

/// Sleeps, then sends a signal to another workflow. Input: {"delay_ms": 2000, "target": "id",
/// "signal": "reminder", "message": "..."} or, instead of "message", the signal's whole
/// "payload".
task<json> reminder(context& ctx, json input) {
  auto delay = std::chrono::milliseconds(get_or<int64_t>(input, "delay_ms", 1000));
  std::string target = get_or<std::string>(input, "target", "");
  std::string signal = get_or<std::string>(input, "signal", "reminder");
  co_await ctx.sleep(delay);
  auto at = co_await ctx.now();
  json note{{"from", ctx.id()},
            {"message", get_or<std::string>(input, "message", "")},
            {"at_ms",
             std::chrono::duration_cast<std::chrono::milliseconds>(at.time_since_epoch()).count()}};
  if (input.is_object() && input.contains("payload")) note = input["payload"];
  if (!target.empty()) co_await ctx.send(target, signal, note);
  co_return json{{"reminded", target}, {"sent", note}};
}

/// The workflow tests and benchmarks drive. Input (all optional):
///   steps: number of steps (3); each returns {"i": i, "at_ns": <clock when it ran>}
///   sleep_ms: a durable sleep after the first half of the steps
///   sleep_each_ms: a durable sleep before every step
///   step_ms: how long each step body works (blocks its thread), e.g. a slow remote call
///   wait: a signal to wait for after the first half; wait_ms: its time-out (60000)
///   children: workflow ids started as `steps` children, each told to notify this one; the run
///             then waits for a "done" signal from each
///   notify: a workflow to send a "done" signal to at the end
///   fail_step: the step (1-based) that throws a permanent error
task<json> steps(context& ctx, json input) {
  int n = get_or<int>(input, "steps", 3);
  int sleep_ms = get_or<int>(input, "sleep_ms", 0);
  std::string wait = get_or<std::string>(input, "wait", "");
  int wait_ms = get_or<int>(input, "wait_ms", 60000);
  int fail_step = get_or<int>(input, "fail_step", 0);
  int sleep_each_ms = get_or<int>(input, "sleep_each_ms", 0);
  int step_ms = get_or<int>(input, "step_ms", 0);
  json results = json::array();
  json signal = nullptr;
  for (int i = 1; i <= n; ++i) {
    if (i == n / 2 + 1) {
      if (sleep_ms > 0) co_await ctx.sleep(std::chrono::milliseconds(sleep_ms));
      if (!wait.empty()) {
        auto got = co_await ctx.wait_for(wait, std::chrono::milliseconds(wait_ms));
        signal = got ? *got : json("timed out");
      }
    }
    if (sleep_each_ms > 0) co_await ctx.sleep(std::chrono::milliseconds(sleep_each_ms));
    // FUSEE_DEMO_STEP_PREFIX renames the steps, as a deploy of changed code would (the tests
    // use it to show a replay that diverges from the journal).
    static const char* prefix = std::getenv("FUSEE_DEMO_STEP_PREFIX");
    auto name = std::string(prefix ? prefix : "") + "step-" + std::to_string(i);
    json v = co_await ctx.step(name, [&] {
      if (i == fail_step) throw worker::permanent_error("step " + std::to_string(i) + " fails");
      if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
      json r{{"i", i},
             {"at_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count()}};
      trace(ctx.id(), name, r);
      return r;
    });
    results.push_back(v);
  }
  json children = json::array();
  if (input.is_object() && input.contains("children")) {
    json child_input{{"steps", 2}, {"notify", ctx.id()}};
    std::string child_type = "steps";
    for (auto& c : input["children"]) {
      std::string child = c.get<std::string>();
      co_await ctx.start_child(child_type, child, child_input);
    }
    for (size_t k = 0; k < input["children"].size(); ++k) {
      std::string done_name = "done";
      auto done = co_await ctx.wait_for(done_name, std::chrono::milliseconds(wait_ms));
      children.push_back(done ? *done : json("timed out"));
    }
  }
  std::string notify = get_or<std::string>(input, "notify", "");
  if (!notify.empty()) {
    json done{{"child", ctx.id()}};
    std::string signal_name = "done";
    co_await ctx.send(notify, signal_name, done);
  }
  json out{{"steps", results}};
  if (!wait.empty()) out["signal"] = signal;
  if (!children.empty()) out["children"] = children;
  co_return out;
}

}  // namespace

void add_demo_workflows(worker::registry& r) {
  r.add("checkout", checkout).add("reminder", reminder).add("steps", steps);
}

}  // namespace fusee::app
