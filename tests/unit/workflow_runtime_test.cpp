// The workflow runtime without sockets: a shard runner driven by hand with a fake clock, its
// journal replayed into fresh runners as recovery would.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>

#include "protocol/frame.hpp"
#include "protocol/shard_hash.hpp"
#include "protocol/signature.hpp"
#include "worker/journal.hpp"
#include "worker/runtime.hpp"
#include "worker/session.hpp"
#include "worker/shard_runner.hpp"

using namespace fusee;
using namespace fusee::worker;
using namespace std::chrono_literals;

namespace {

struct fake_env : runner_env {
  uint64_t now = 1'000'000;
  uint64_t next_random = 0;
  uint64_t ids = 1;
  int before_steps = 0;
  std::vector<std::string> lines;
  uint64_t now_ms() override { return now; }
  uint64_t random() override { return next_random; }
  void before_step() override { ++before_steps; }
  uint64_t next_request_id() override { return ids++; }
  void log(const std::string& l) override { lines.push_back(l); }
  /// The loop's turn is over once turn_over() said "not yet" this many times more (-1: never).
  int turn_checks_left = -1;
  bool turn_over() override {
    if (turn_checks_left <= 0) return turn_checks_left == 0;
    --turn_checks_left;
    return false;
  }
};

/// Counts the executions of step bodies by (workflow, step).
struct bodies {
  std::map<std::string, int> runs;
  int& of(const std::string& wf, const std::string& step) { return runs[wf + "/" + step]; }
};

/// The test workflows: "pair" runs steps a and b; "waiter" sleeps then waits for "go";
/// "flaky" retries a step that fails `fails` times; "sender" sends and starts a child.
registry make_types(bodies& b, std::string second_step = "b") {
  registry r;
  r.add("pair", [&b, second_step](context& ctx, json in) -> task<json> {
    json x = co_await ctx.step("a", [&] {
      ++b.of(ctx.id(), "a");
      return in.value("x", 0) + 1;
    });
    json y = co_await ctx.step(second_step, [&] {
      ++b.of(ctx.id(), second_step);
      return x.get<int>() * 10;
    });
    co_return json{{"x", x}, {"y", y}};
  });
  r.add("waiter", [&b](context& ctx, json in) -> task<json> {
    co_await ctx.sleep(std::chrono::milliseconds(in.value("sleep_ms", 0)));
    std::string name = "go";
    auto got = co_await ctx.wait_for(name, std::chrono::milliseconds(in.value("wait_ms", 5000)));
    co_await ctx.step("after", [&] { return ++b.of(ctx.id(), "after"); });
    co_return got ? *got : json("timed out");
  });
  r.add("flaky", [&b](context& ctx, json in) -> task<json> {
    int fails = in.value("fails", 0);
    bool permanent = in.value("permanent", false);
    step_options o;
    o.attempts = 3;
    o.backoff = 100ms;
    o.jitter = 0.5;
    std::string step_name = "call";  // (GCC 12: no string literal inside this co_await)
    auto body = [&]() -> json {
      int n = ++b.of(ctx.id(), "call");
      if (permanent) throw permanent_error("card declined");
      if (n <= fails) throw std::runtime_error("unavailable " + std::to_string(n));
      return n;
    };
    json out;
    try {
      json v = co_await ctx.step(step_name, body, o);
      out["ok"] = v;
    } catch (const step_failed& e) {
      out["caught"] = e.what();
    }
    co_return out;
  });
  // A step whose value and error JSON cannot hold as they are (NaN, bytes that are not UTF-8):
  // the workflow branches on what it got back.
  r.add("odd", [](context& ctx, json) -> task<json> {
    std::string nan_step = "nan", bad_step = "bad utf-8";
    json v = co_await ctx.step(nan_step, [] { return json(std::nan("")); });
    std::string caught;
    step_options once;
    once.attempts = 1;
    try {
      co_await ctx.step(
          bad_step, []() -> json { throw std::runtime_error("bad \xff byte"); }, once);
    } catch (const step_failed& e) {
      caught = e.what();
    }
    co_return json{{"value", v.is_null() ? "null" : "a number"}, {"caught", caught}};
  });
  // "loop" runs n steps, one after the other (each ready at once: nothing waits in it).
  r.add("loop", [&b](context& ctx, json in) -> task<json> {
    int n = in.value("n", 0);
    for (int i = 0; i < n; ++i) {
      std::string name = "s" + std::to_string(i);
      co_await ctx.step(name, [&] { return ++b.of(ctx.id(), "loop"); });
    }
    co_return n;
  });
  // "spin" runs n operations of one kind (input "op"), each ready at once, counting them.
  r.add("spin", [&b](context& ctx, json in) -> task<json> {
    int n = in.value("n", 0);
    std::string op = in.value("op", ""), target = "elsewhere", name = "ping", never = "never";
    json message{{"n", 1}};
    for (int i = 0; i < n; ++i) {
      if (op == "now")
        co_await ctx.now();
      else if (op == "random")
        co_await ctx.random();
      else if (op == "sleep0")
        co_await ctx.sleep(std::chrono::milliseconds(0));
      else if (op == "wait0")
        co_await ctx.wait_for(never, std::chrono::milliseconds(0));
      else if (op == "send")
        co_await ctx.send(target, name, message);
      ++b.of(ctx.id(), "spin");
    }
    co_return n;
  });
  // "careless" asks for n now()s (or, with "steps", n steps) without co_awaiting them (against
  // the contract; the compiler warns without the cast).
  r.add("careless", [&b](context& ctx, json in) -> task<json> {
    int n = in.value("n", 0);
    bool steps = in.value("steps", false);
    for (int i = 0; i < n; ++i) {
      std::string name = "s" + std::to_string(i);
      if (steps)
        (void)ctx.step(name, [&b, &ctx, name] { return ++b.of(ctx.id(), name); });
      else
        (void)ctx.now();
      ++b.of(ctx.id(), "careless");
    }
    co_return n;
  });
  r.add("sender", [](context& ctx, json) -> task<json> {
    std::string target = "someone", name = "hello", child_type = "pair", child = "kid";
    // GCC 12 cannot keep a string literal inside a co_await expression: build values first.
    json message{{"n", 1}}, input{{"x", 4}};
    co_await ctx.send(target, name, message);
    co_await ctx.start_child(child_type, child, input);
    auto t = co_await ctx.now();
    auto r = co_await ctx.random();
    co_return json{{"t", t.time_since_epoch().count() != 0}, {"r", r}};
  });
  // "starter" starts a child and signals it at once, and signals someone else.
  r.add("starter", [](context& ctx, json) -> task<json> {
    std::string type = "waiter", child = "kid", go = "go", other = "someone";
    json input = json::object(), payload = 1;
    co_await ctx.start_child(type, child, input);
    co_await ctx.send(child, go, payload);
    co_await ctx.send(other, go, payload);
    co_return true;
  });
  // "big_sender" sends a signal of in.bytes bytes and says what send threw, if anything.
  r.add("big_sender", [](context& ctx, json in) -> task<json> {
    std::string other = "someone", name = "big", error;
    json payload = std::string(in.value("bytes", size_t{0}), 'x');
    try {
      co_await ctx.send(other, name, payload);
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
    co_return error;
  });
  // "parent" starts the child in.child and says what start_child threw, if anything.
  r.add("parent", [](context& ctx, json in) -> task<json> {
    std::string type = "pair", child = in.value("child", "");
    json input = json::object();
    std::string error;
    try {
      co_await ctx.start_child(type, child, input);
    } catch (const std::invalid_argument& e) {
      error = e.what();
    }
    auto r = co_await ctx.random();
    co_return json{{"error", error}, {"r", r}};
  });
  return r;
}

proto::bytes text(const std::string& s) {
  return proto::bytes(s.begin(), s.end());
}

/// A runner on shard 0 epoch 1, with its own journal of what it appended.
struct rig {
  fake_env env;
  bodies b;
  registry types;
  std::unique_ptr<shard_runner> runner;
  std::vector<proto::bytes> journal;
  explicit rig(std::string second = "b") : types(make_types(b, second)) {
    fresh();
    runner->start(0);
  }
  runner_settings settings = [] {
    runner_settings s;
    s.retention_ms = 3600000;
    return s;
  }();
  void fresh(uint32_t shard_count = 4) {
    settings.shard_count = shard_count;
    runner =
        std::make_unique<shard_runner>(proto::shard_id{0}, proto::epoch_t{1}, types, env, settings);
  }
  /// Takes what was appended into the journal: one record (the most one byte's limit takes),
  /// then the rest, so every test checks that a partial take leaves the others queued in order.
  void append() {
    for (size_t limit : {size_t{1}, size_t{0}}) {
      if (!runner->has_records()) return;
      auto a = runner->take_append(limit);
      CHECK(a.first_lsn.value() == journal.size() + 1);
      if (limit == 1) CHECK(a.records.size() == 1);
      for (auto& r : a.records)
        journal.push_back(r);
    }
    CHECK_FALSE(runner->has_records());
  }
  void durable() {
    append();
    runner->on_durable(journal.size());
  }
  /// A new runner restored from checkpoint `cp` and started after it (as a new lease would).
  void restore(const proto::checkpoint& cp) {
    fresh();
    REQUIRE(runner->restore(cp.lsn.value(), cp.data));
    runner->start(cp.lsn.value());
  }
  /// A new runner recovered from the journal (as a new lease would).
  void recover(std::vector<proto::bytes> records) {
    journal = records;  // the shard's log is what was recovered
    fresh();
    for (size_t i = 0; i < records.size(); ++i)
      REQUIRE(runner->replay(i + 1, records[i]));
    runner->start(records.size());
  }
  void call(uint64_t relay, const std::string& method, const json& args) {
    runner->on_call(relay, method, text(args.dump()));
  }
  /// A fresh started runner whose steps park at `n` records not yet durable (max_records_ahead).
  void bound_records(uint64_t n) {
    settings.max_records_ahead = n;
    fresh();
    runner->start(0);
  }
  /// Makes the records durable and ticks, at most `most` times, until `done()`.
  template <class Pred>
  void durable_turns_until(Pred done, int most) {
    for (int turns = 0; turns < most && !done(); ++turns) {
      durable();
      runner->tick();
    }
  }
  /// Starts run `id` of "loop" with `n` steps (the CALL `relay`).
  void start_loop(uint64_t relay, const std::string& id, int n) {
    call(relay, "start", {{"id", id}, {"type", "loop"}, {"input", {{"n", n}}}});
  }
  /// The CALL_REPLY for `relay` among the frames ready to leave (removed), if any.
  std::optional<proto::call_reply> reply(uint64_t relay) {
    auto& f = runner->ready_frames();
    for (auto it = f.begin(); it != f.end(); ++it)
      if (auto* r = std::get_if<proto::call_reply>(&*it); r && r->relay == relay) {
        auto out = *r;
        f.erase(it);
        return out;
      }
    return std::nullopt;
  }
  json answer(uint64_t relay) {
    durable();
    auto r = reply(relay);
    REQUIRE(r.has_value());
    return json::parse(r->body.begin(), r->body.end());
  }
  template <class T>
  std::vector<T> frames() {
    std::vector<T> out;
    for (auto& f : runner->ready_frames())
      if (auto* x = std::get_if<T>(&f)) out.push_back(*x);
    return out;
  }
};

}  // namespace

TEST_CASE("journal records and checkpoints decode to what was encoded and damage names the field") {
  std::vector<record> all{
      rec::started{"w", "t", "{}", "p", 3, 9, 77},
      rec::op_done{"w", 2, op_kind::wait, "go", 1, "\"x\""},
      rec::timer_set{"w", 1, op_kind::sleep, "", 123456},
      rec::signal{"w", "go", "1", from_call, 0, 0, {}},
      rec::sent{"w", 4, op_kind::child, "kid", 8, 2, "{}"},
      rec::acked{8},
      rec::finished{"w", run_status::failed, "\"boom\"", 99},
      rec::seen{5, 6},
      rec::signal{"w", "go", "1", from_call, 0, 5, "retry-1"},
      rec::signal_key{"w", "retry-1", 5, 0x0123456789abcdefull},
  };
  for (auto& r : all) {
    auto back = decode_record(encode(r));
    REQUIRE(back);
    CHECK(encode(*back) == encode(r));
  }
  auto ck = decode_checkpoint(encode_checkpoint(all));
  REQUIRE(ck);
  CHECK(ck->size() == all.size());

  auto bytes = encode(all[1]);
  bytes.resize(bytes.size() - 2);
  auto bad = decode_record(bytes);
  REQUIRE(!bad);
  CHECK(bad.err().message.find("op_done") != std::string::npos);
  CHECK(bad.err().message.find("value") != std::string::npos);
  CHECK(!decode_record(proto::bytes{99}));
  CHECK(!decode_checkpoint(text("nope")));
}

TEST_CASE("a signal record without a key ends where records written before keys existed end, and "
          "decodes with none") {
  auto keyed = encode(rec::signal{"w", "go", "1", from_call, 0, 5, "k"});
  auto plain = encode(rec::signal{"w", "go", "1", from_call, 0, 5, {}});
  // The key is the last field: a record without one is the keyed record less that field.
  CHECK(plain.size() + 2 == keyed.size());
  CHECK(std::equal(plain.begin(), plain.end(), keyed.begin()));
  auto back = decode_record(plain);
  REQUIRE(back);
  CHECK(std::get<rec::signal>(*back).key.empty());
  back = decode_record(keyed);
  REQUIRE(back);
  CHECK(std::get<rec::signal>(*back).key == "k");
  // A key present but empty is refused: a record has one encoding (an empty key is absent).
  auto empty = plain;
  empty.push_back(0);
  auto bad = decode_record(empty);
  REQUIRE(!bad);
  CHECK(bad.err().message.find("key present but empty") != std::string::npos);
}

TEST_CASE("a step runs once and a replay of the journal returns its result without running it") {
  rig t;
  t.call(1, "start", {{"id", "w1"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  CHECK(t.answer(1)["status"] == "completed");
  CHECK(t.b.of("w1", "a") == 1);
  CHECK(t.b.of("w1", "b") == 1);
  CHECK(t.env.before_steps == 2);  // what was ready went out before each body

  auto journal = t.journal;
  t.recover(journal);
  t.call(2, "result", {{"id", "w1"}});
  auto r = t.answer(2);
  CHECK(r["result"] == json({{"x", 2}, {"y", 20}}));
  CHECK(t.b.of("w1", "a") == 1);
  CHECK(t.b.of("w1", "b") == 1);

  // Recovery from a journal cut after the first step: only the second body runs.
  std::vector<proto::bytes> cut(journal.begin(), journal.begin() + 2);  // started, a
  t.recover(cut);
  CHECK(t.b.of("w1", "a") == 1);
  CHECK(t.b.of("w1", "b") == 2);
  t.call(3, "result", {{"id", "w1"}});
  CHECK(t.answer(3)["result"] == json({{"x", 2}, {"y", 20}}));
}

TEST_CASE("a step's value and error are what a replay will read from the journal, also where "
          "JSON cannot hold them as they were (NaN, bytes that are not UTF-8)") {
  rig t;
  t.call(1, "start", {{"id", "w1"}, {"type", "odd"}});
  auto live = t.answer(1);
  REQUIRE(live["status"] == "completed");
  CHECK(live["result"]["value"] == "null");  // NaN is journaled as null: live it is null too
  auto caught = live["result"]["caught"].get<std::string>();
  CHECK(caught.find("bad \xef\xbf\xbd byte") != std::string::npos);  // U+FFFD, as journaled
  t.recover(t.journal);
  t.call(2, "result", {{"id", "w1"}});
  CHECK(t.answer(2)["result"] == live["result"]);
}

TEST_CASE("a step is reported durable once, when the DURABLE covering its record comes, and a "
          "replayed step is not reported again") {
  rig t;
  std::vector<std::string> told;
  t.settings.on_step_durable = [&](const step_durable& d) {
    CHECK(d.since_body.count() >= 0);
    told.push_back(d.workflow + "/" + d.step);
  };
  t.fresh();
  t.runner->start(0);
  t.call(1, "start", {{"id", "w1"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  t.append();  // started (1), a (2), b (3), finished (4): none durable yet
  CHECK(told.empty());
  t.runner->on_durable(2);
  CHECK(told == std::vector<std::string>{"w1/a"});
  t.runner->on_durable(2);  // the same position again tells nothing new
  CHECK(told.size() == 1);
  t.runner->on_durable(t.journal.size());
  CHECK(told == std::vector<std::string>{"w1/a", "w1/b"});

  t.recover(t.journal);  // replayed steps are durable already and do not run
  t.runner->on_durable(t.journal.size());
  CHECK(told.size() == 2);
}

TEST_CASE("a shard is due for a checkpoint after checkpoint_every records or once its oldest "
          "record outside a checkpoint is checkpoint_after_ms old") {
  rig t;
  t.settings.checkpoint_every = 100;
  t.settings.checkpoint_after_ms = 5000;
  t.fresh();
  t.runner->start(0);
  CHECK_FALSE(t.runner->checkpoint_due(t.env.now + 10'000'000));  // nothing to checkpoint
  t.call(1, "start", {{"id", "w1"}, {"type", "pair"}, {"input", {{"x", 1}}}});  // a few records
  t.durable();
  uint64_t first = t.env.now;
  CHECK_FALSE(t.runner->checkpoint_due(first + 4999));
  CHECK(t.runner->checkpoint_due(first + 5000));
  t.env.now = first + 5000;
  REQUIRE(t.runner->checkpoint() != 0);
  CHECK_FALSE(t.runner->checkpoint_due(first + 5000 + 10'000'000));  // nothing new since

  // New records start the clock again from the first of them.
  t.env.now = first + 20000;
  t.call(2, "start", {{"id", "w2"}, {"type", "pair"}, {"input", {{"x", 2}}}});
  t.durable();
  CHECK_FALSE(t.runner->checkpoint_due(first + 24999));
  CHECK(t.runner->checkpoint_due(first + 25000));

  // By count: 100 records since the checkpoint, whatever their age.
  t.settings.checkpoint_after_ms = 0;
  t.fresh();
  t.runner->start(0);
  for (int i = 0; t.runner->records_since_checkpoint() < 100; ++i)
    t.call(10 + i, "start", {{"id", "c" + std::to_string(i)}, {"type", "pair"}, {"input", {}}});
  CHECK(t.runner->checkpoint_due(t.env.now));
}

TEST_CASE(
    "code runs ahead of the disk: a reply leaves only once every record before it is durable") {
  rig t;
  t.call(1, "start", {{"id", "w1"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  // The workflow ran to its end at once; nothing left the process.
  CHECK(t.b.of("w1", "b") == 1);
  t.append();
  REQUIRE(t.journal.size() == 4);  // started, a, b, finished
  CHECK(!t.reply(1));
  t.runner->on_durable(3);
  CHECK(!t.reply(1));
  t.runner->on_durable(4);
  CHECK(t.reply(1));
}

TEST_CASE("an answer too long for one reply is replaced by a too_large error, so the worker keeps "
          "its connection") {
  rig t;
  t.settings.max_reply_bytes = 300;
  t.fresh();
  t.runner->start(0);
  // a running workflow whose input alone is longer than a reply may be
  t.call(1, "start",
         {{"id", "w1"},
          {"type", "waiter"},
          {"input", {{"sleep_ms", 1000}, {"pad", std::string(400, 'p')}}}});
  CHECK(t.answer(1)["status"] == "running");  // short enough
  t.call(2, "describe", {{"id", "w1"}});
  t.durable();
  auto r = t.reply(2);
  REQUIRE(r.has_value());
  INFO(std::string(r->body.begin(), r->body.end()));
  CHECK(r->ok == 0);
  auto body = json::parse(r->body.begin(), r->body.end());
  CHECK(body["code"] == "too_large");
  CHECK(body["error"].get<std::string>().find("over the limit of 300 bytes") != std::string::npos);
}

TEST_CASE("a runner is quiet only once every record it appended is durable") {
  rig t;
  t.call(1, "start", {{"id", "w1"}, {"type", "waiter"}, {"input", {{"sleep_ms", 1000}}}});
  CHECK(t.answer(1)["status"] == "running");
  CHECK(t.runner->quiet());
  t.env.now += 1000;
  t.runner->tick();  // the sleep ends and the wait for the signal begins: records, no answer
  t.append();        // sent, not durable yet
  REQUIRE(t.runner->ready_frames().empty());
  CHECK_FALSE(t.runner->quiet());  // an invoked worker must not leave yet
  t.runner->on_durable(t.journal.size());
  CHECK(t.runner->quiet());
}

TEST_CASE("a sleep is a durable timer that fires at its due time and a replay after it does not "
          "wait") {
  rig t;
  t.call(1, "start", {{"id", "s"}, {"type", "waiter"}, {"input", {{"sleep_ms", 1000}}}});
  t.durable();
  CHECK(t.runner->next_wake_ms() == t.env.now + 1000);
  CHECK(t.runner->next_due_ms() == t.env.now + 1000);
  t.env.now += 999;
  t.runner->tick();
  t.call(2, "describe", {{"id", "s"}});
  auto d = t.answer(2);
  CHECK(d["current"] == "sleep");
  CHECK(d["timers"][0]["due_in_ms"] == 1);
  t.env.now += 1;
  t.runner->tick();
  t.call(3, "describe", {{"id", "s"}});
  CHECK(t.answer(3)["current"] == "waiting for signal 'go'");

  // A replay of the journal cut before the timer fired, after its due time: no wait.
  std::vector<proto::bytes> cut(t.journal.begin(), t.journal.begin() + 2);  // started, timer_set
  t.recover(cut);
  t.call(4, "describe", {{"id", "s"}});
  CHECK(t.answer(4)["current"] == "waiting for signal 'go'");
}

TEST_CASE("a signal sent before the wait waits in the inbox and one sent during it wakes it and a "
          "time-out returns nothing") {
  rig t;
  // Before: the run sleeps, the signal arrives, the wait takes it at once after the sleep.
  t.call(1, "start", {{"id", "early"}, {"type", "waiter"}, {"input", {{"sleep_ms", 50}}}});
  t.call(2, "signal", {{"id", "early"}, {"name", "go"}, {"payload", "first"}});
  CHECK(t.answer(2)["delivered"] == true);
  t.call(3, "describe", {{"id", "early"}});
  CHECK(t.answer(3)["pending_signals"].size() == 1);
  t.env.now += 50;
  t.runner->tick();
  t.call(4, "result", {{"id", "early"}});
  CHECK(t.answer(4)["result"] == "first");

  // During: the run waits, the signal wakes it.
  t.call(5, "start", {{"id", "late"}, {"type", "waiter"}, {"input", json::object()}});
  t.call(6, "signal", {{"id", "late"}, {"name", "go"}, {"payload", {{"k", 2}}}});
  t.call(7, "result", {{"id", "late"}});
  CHECK(t.answer(7)["result"] == json({{"k", 2}}));

  // Time-out.
  t.call(8, "start", {{"id", "alone"}, {"type", "waiter"}, {"input", {{"wait_ms", 300}}}});
  t.call(9, "result", {{"id", "alone"}, {"wait_ms", 10000}});
  t.durable();
  CHECK(!t.reply(9));  // waits for the run to end
  t.env.now += 300;
  t.runner->tick();
  CHECK(t.answer(9)["result"] == "timed out");

  // Replay: every run ends the same, and the consumed signals are not taken twice.
  auto journal = t.journal;
  t.recover(journal);
  t.call(10, "result", {{"id", "early"}});
  CHECK(t.answer(10)["result"] == "first");
  t.call(11, "result", {{"id", "late"}});
  CHECK(t.answer(11)["result"] == json({{"k", 2}}));
  CHECK(t.b.of("late", "after") == 1);
}

TEST_CASE(
    "a failing step retries with jittered backoff and a permanent error fails at once and the "
    "workflow can catch it") {
  rig t;
  t.env.next_random = 500000;  // jitter factor 1 - 0.5 * 0.5
  t.call(1, "start", {{"id", "f"}, {"type", "flaky"}, {"input", {{"fails", 2}}}});
  CHECK(t.b.of("f", "call") == 1);
  CHECK(t.runner->next_wake_ms() == t.env.now + 75);  // 100 ms * 0.75
  t.env.now += 74;
  t.runner->tick();
  CHECK(t.b.of("f", "call") == 1);
  t.env.now += 1;
  t.runner->tick();
  CHECK(t.b.of("f", "call") == 2);
  CHECK(t.runner->next_wake_ms() == t.env.now + 150);  // 200 ms * 0.75
  t.env.now += 150;
  t.runner->tick();
  CHECK(t.b.of("f", "call") == 3);
  t.call(2, "result", {{"id", "f"}});
  CHECK(t.answer(2)["result"] == json({{"ok", 3}}));

  // A new holder goes on with the next attempt at its time: attempts count across leases.
  t.call(10, "start", {{"id", "h"}, {"type", "flaky"}, {"input", {{"fails", 9}}}});
  CHECK(t.b.of("h", "call") == 1);
  t.durable();
  t.recover(t.journal);
  CHECK(t.b.of("h", "call") == 1);  // attempt 2 is not due yet
  CHECK(t.runner->next_due_ms() == t.env.now + 75);
  t.env.now += 75;
  t.runner->tick();
  CHECK(t.b.of("h", "call") == 2);
  t.durable();
  t.recover(t.journal);
  t.env.now += 150;
  t.runner->tick();
  CHECK(t.b.of("h", "call") == 3);  // the third and last attempt
  t.call(11, "result", {{"id", "h"}});
  CHECK(t.answer(11)["result"]["caught"] == "step 'call' failed: unavailable 3");

  // Attempts run out: the error is caught by the workflow.
  t.call(3, "start", {{"id", "g"}, {"type", "flaky"}, {"input", {{"fails", 9}}}});
  for (int i = 0; i < 5; ++i) {
    t.env.now += 1000;
    t.runner->tick();
  }
  CHECK(t.b.of("g", "call") == 3);
  t.call(4, "result", {{"id", "g"}});
  CHECK(t.answer(4)["result"]["caught"] == "step 'call' failed: unavailable 3");

  t.call(5, "start", {{"id", "p"}, {"type", "flaky"}, {"input", {{"permanent", true}}}});
  CHECK(t.b.of("p", "call") == 1);
  t.call(6, "result", {{"id", "p"}});
  CHECK(t.answer(6)["result"]["caught"] == "step 'call' failed: card declined");

  // A replay of a failed step throws again without running it.
  auto journal = t.journal;
  t.recover(journal);
  t.call(7, "result", {{"id", "p"}});
  CHECK(t.answer(7)["result"]["caught"] == "step 'call' failed: card declined");
  CHECK(t.b.of("p", "call") == 1);
}

TEST_CASE("a replay that diverges from the journal stops only that workflow and names both "
          "operations") {
  rig t;
  t.call(1, "start", {{"id", "old"}, {"type", "waiter"}, {"input", json::object()}});
  t.call(2, "start", {{"id", "p1"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  t.durable();
  // Steps a and b ran for p1; now the code names its second step differently.
  rig changed("b2");
  changed.recover(t.journal);
  changed.call(3, "result", {{"id", "p1"}});
  auto r = changed.answer(3);
  CHECK(r["status"] == "completed");  // finished runs are not replayed
  changed.call(4, "describe", {{"id", "old"}});
  CHECK(changed.answer(4)["status"] == "running");

  // A run in flight under the old code, then recovered by the new one.
  rig mid;
  mid.call(1, "start", {{"id", "half"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  mid.call(2, "start", {{"id", "other"}, {"type", "waiter"}, {"input", json::object()}});
  mid.durable();
  // Keep started + a + (other's records), drop "half"'s step b and finished.
  std::vector<proto::bytes> cut;
  for (size_t i = 0; i < mid.journal.size(); ++i)
    if (i != 2 && i != 3) cut.push_back(mid.journal[i]);
  // Re-insert a fake "b" journaled under another name: the new code asks for "b2".
  cut.push_back(encode(rec::op_done{"half", 1, op_kind::step, "b", 1, "20"}));
  changed.recover(cut);
  changed.call(5, "result", {{"id", "half"}});
  auto h = changed.answer(5);
  CHECK(h["status"] == "stopped");
  CHECK(h["error"] ==
        "replay diverged at operation 1 of workflow 'half': the journal has step 'b', the code "
        "asked for step 'b2'");
  changed.call(6, "describe", {{"id", "other"}});
  CHECK(changed.answer(6)["current"] == "waiting for signal 'go'");
  REQUIRE(!changed.env.lines.empty());
}

TEST_CASE("a checkpoint stands for the journal before it: the restored runner has the same runs") {
  rig t;
  t.call(1, "start", {{"id", "done"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  t.call(2, "start", {{"id", "waits"}, {"type", "waiter"}, {"input", json::object()}});
  t.call(3, "signal", {{"id", "waits"}, {"name", "other"}, {"payload", 7}});
  t.durable();
  t.runner->checkpoint();
  auto cps = t.frames<proto::checkpoint>();
  REQUIRE(cps.size() == 1);
  CHECK(cps[0].lsn.value() == t.journal.size());
  CHECK(t.runner->records_since_checkpoint() == 0);

  t.restore(cps[0]);
  t.call(4, "result", {{"id", "done"}});
  CHECK(t.answer(4)["result"] == json({{"x", 2}, {"y", 20}}));
  t.call(5, "describe", {{"id", "waits"}});
  auto d = t.answer(5);
  CHECK(d["current"] == "waiting for signal 'go'");
  CHECK(d["pending_signals"][0]["name"] == "other");
  t.call(6, "signal", {{"id", "waits"}, {"name", "go"}, {"payload", 1}});
  t.call(7, "result", {{"id", "waits"}});
  CHECK(t.answer(7)["result"] == 1);
  CHECK(t.b.of("done", "a") == 1);
}

TEST_CASE("RELAY leaves after durable and the outbox is resent by the next lease until "
          "acknowledged and a resent message is taken once") {
  rig t;
  t.call(1, "start", {{"id", "s"}, {"type", "sender"}, {"input", json::object()}});
  t.append();
  CHECK(t.frames<proto::relay>().empty());
  t.durable();
  auto relays = t.frames<proto::relay>();
  REQUIRE(relays.size() == 2);
  CHECK(relays[0].target == proto::shard_for("someone", 4));
  CHECK(relays[1].target == proto::shard_for("kid", 4));
  t.runner->ready_frames().clear();
  // Only the first is acknowledged; the next lease resends the second.
  t.runner->on_ack(relays[0].outbox_id);
  t.durable();
  t.recover(t.journal);
  auto again = t.frames<proto::relay>();
  REQUIRE(again.size() == 1);
  CHECK(again[0].outbox_id == relays[1].outbox_id);
  CHECK(again[0].payload == relays[1].payload);
  // A checkpoint keeps the newest message while it is unacknowledged...
  t.runner->ready_frames().clear();
  t.runner->checkpoint();
  auto cp1 = t.frames<proto::checkpoint>().at(0);
  t.restore(cp1);
  auto kept = t.frames<proto::relay>();
  REQUIRE(kept.size() == 1);
  CHECK(kept[0].outbox_id == relays[1].outbox_id);
  // ...and a holder sends it again now and then until it is acknowledged.
  t.runner->ready_frames().clear();
  t.env.now += 29999;
  t.runner->tick();
  CHECK(t.frames<proto::relay>().empty());
  t.env.now += 1;
  t.runner->tick();
  CHECK(t.frames<proto::relay>().size() == 1);
  t.runner->ready_frames().clear();
  // Outbox ids keep growing after a checkpoint even when every message was acknowledged.
  t.runner->on_ack(relays[1].outbox_id);
  t.durable();
  t.runner->checkpoint();
  auto cp = t.frames<proto::checkpoint>().at(0);
  t.restore(cp);
  CHECK(t.frames<proto::relay>().empty());
  CHECK(t.runner->next_due_ms() == UINT64_MAX);

  // The receiving side: a start message, delivered twice, starts one run; both are acked.
  rig r;
  json start{{"kind", "start"}, {"workflow", "kid"}, {"type", "pair"}, {"input", {{"x", 4}}}};
  r.runner->on_message(2, 5, 11, text(start.dump()));
  r.runner->on_message(2, 5, 11, text(start.dump()));
  r.durable();
  CHECK(r.frames<proto::message_ack>().size() == 2);
  CHECK(r.b.of("kid", "a") == 1);
  // Also after recovery.
  r.recover(r.journal);
  r.runner->on_message(2, 6, 11, text(start.dump()));
  r.durable();
  CHECK(r.frames<proto::message_ack>().size() == 1);
  CHECK(r.b.of("kid", "a") == 1);
}

TEST_CASE("start is idempotent by id and another type is a conflict and unknown types and methods "
          "are named and cancel ends a waiting run") {
  rig t;
  t.call(1, "start", {{"id", "w"}, {"type", "waiter"}, {"input", json::object()}});
  CHECK(t.answer(1)["existing"] == false);
  t.call(2, "start", {{"id", "w"}, {"type", "waiter"}, {"input", json::object()}});
  CHECK(t.answer(2)["existing"] == true);
  t.call(3, "start", {{"id", "w"}, {"type", "pair"}, {"input", json::object()}});
  CHECK(t.answer(3)["code"] == "conflict");
  t.call(4, "start", {{"id", "x"}, {"type", "nope"}});
  CHECK(t.answer(4)["error"] ==
        "unknown workflow type 'nope'; this worker has: big_sender, careless, flaky, loop, "
        "odd, pair, parent, sender, spin, starter, waiter");
  t.call(5, "frobnicate", {{"id", "w"}});
  CHECK(t.answer(5)["code"] == "bad_request");
  t.call(51, "frobnicate", json::object());  // named as unknown before its missing id
  CHECK(t.answer(51)["error"] ==
        "unknown method 'frobnicate'; methods: start, signal, result, describe, cancel");
  t.call(6, "result", {{"id", "zz"}});
  CHECK(t.answer(6)["code"] == "not_found");
  t.runner->on_call(7, "start", text("not json"));
  CHECK(t.answer(7)["code"] == "bad_request");

  t.call(8, "result", {{"id", "w"}, {"wait_ms", 60000}});
  t.call(9, "cancel", {{"id", "w"}});
  CHECK(t.answer(9)["status"] == "cancelled");
  CHECK(t.answer(8)["status"] == "cancelled");
  t.call(10, "signal", {{"id", "w"}, {"name", "go"}});
  CHECK(t.answer(10)["code"] == "finished");
  t.recover(t.journal);
  t.call(11, "result", {{"id", "w"}});
  CHECK(t.answer(11)["status"] == "cancelled");
  CHECK(t.b.of("w", "after") == 0);

  // Leaving answers waiting result calls at once, and later ones without waiting.
  t.call(12, "start", {{"id", "v"}, {"type", "waiter"}, {"input", json::object()}});
  t.call(13, "result", {{"id", "v"}, {"wait_ms", 60000}});
  t.durable();
  CHECK(!t.reply(13));
  t.runner->leave();
  CHECK(t.answer(13)["status"] == "running");
  t.call(14, "result", {{"id", "v"}, {"wait_ms", 60000}});
  CHECK(t.answer(14)["status"] == "running");
}

TEST_CASE("runs of types without code here wait for a worker that has it and are reported") {
  rig t;
  json start{{"kind", "start"}, {"workflow", "alien"}, {"type", "elsewhere"}};
  t.runner->on_message(1, 1, 1, text(start.dump()));
  t.durable();
  CHECK(t.runner->missing_types() == std::vector<std::string>{"elsewhere"});
  t.call(1, "describe", {{"id", "alien"}});
  CHECK(t.answer(1)["current"] == "waiting for a worker with code for type 'elsewhere'");
}

TEST_CASE("an invocation POST is verified before it runs: 401 for the signature and 400 for the "
          "body") {
  auto now = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                       std::chrono::system_clock::now().time_since_epoch())
                                       .count());
  std::string body =
      R"({"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3],"budget_ms":1000,)"
      R"("reasons":["call"],"server":"127.0.0.1:1"})";
  std::vector<std::string> secrets{"old", "s3cret"};
  auto none = verify_invocation("", body, secrets);
  CHECK(none.refusal.http_status == 401);
  CHECK(!none.request);
  auto wrong = verify_invocation(proto::sign("other", now, body), body, secrets);
  CHECK(wrong.refusal.http_status == 401);
  auto stale = verify_invocation(proto::sign("s3cret", now - 600000, body), body, secrets);
  CHECK(stale.refusal.http_status == 401);
  std::string bad_body = R"({"version":1})";
  auto bad = verify_invocation(proto::sign("s3cret", now, bad_body), bad_body, secrets);
  CHECK(bad.refusal.http_status == 400);
  auto ok = verify_invocation(proto::sign("s3cret", now, body), body, secrets);
  REQUIRE(ok.request);
  CHECK(ok.request->shards == std::vector<proto::shard_id>{proto::shard_id{3}});
  CHECK(ok.request->budget_ms == 1000);
}

TEST_CASE("finished runs are forgotten by the first checkpoint after their retention period") {
  rig t;  // retention: one hour
  t.call(1, "start", {{"id", "old"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  t.env.now += 3600000;
  t.call(2, "start", {{"id", "recent"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  t.call(3, "start", {{"id", "open"}, {"type", "waiter"}, {"input", json::object()}});
  t.durable();
  t.runner->checkpoint();  // journals the forgetting first: it leaves once that is durable
  CHECK(t.frames<proto::checkpoint>().empty());
  t.durable();
  auto cp = t.frames<proto::checkpoint>().at(0);
  t.restore(cp);
  t.call(4, "result", {{"id", "old"}});
  CHECK(t.answer(4)["code"] == "not_found");
  t.call(5, "result", {{"id", "recent"}});
  CHECK(t.answer(5)["status"] == "completed");
  t.call(6, "result", {{"id", "open"}});
  CHECK(t.answer(6)["status"] == "running");
  // The id is free again.
  t.call(7, "start", {{"id", "old"}, {"type", "pair"}, {"input", {{"x", 5}}}});
  CHECK(t.answer(7)["existing"] == false);

  // Forgetting is journaled: a recovery from the log alone (the checkpoint lost) agrees.
  rig r;
  r.call(1, "start", {{"id", "old"}, {"type", "pair"}, {"input", {{"x", 1}}}});
  r.env.now += 3600000;
  r.durable();
  r.runner->checkpoint();
  r.call(2, "start", {{"id", "old"}, {"type", "pair"}, {"input", {{"x", 7}}}});
  r.durable();
  r.recover(r.journal);
  r.call(3, "result", {{"id", "old"}});
  CHECK(r.answer(3)["result"] == json({{"x", 8}, {"y", 80}}));
}

TEST_CASE("the mark that recognises a resent message is kept for the retention period and then "
          "forgotten by a checkpoint") {
  rig t;  // retention: one hour
  json start{{"kind", "start"}, {"workflow", "kid"}, {"type", "pair"}, {"input", {{"x", 1}}}};
  t.runner->on_message(3, 1, 40, text(start.dump()));
  t.durable();
  t.env.now += 3599999;
  t.runner->checkpoint();
  t.durable();
  auto cp = t.frames<proto::checkpoint>().at(0);
  t.restore(cp);
  // Within the period, from the checkpoint: still recognised.
  json signal{{"kind", "signal"}, {"workflow", "nobody"}, {"name", "x"}};
  t.runner->on_message(3, 1, 40, text(signal.dump()));
  t.durable();
  CHECK(t.env.lines.empty());  // acknowledged as a resend, not handled (nothing dropped)
  t.env.now += 1;
  t.runner->on_message(9, 1, 1, text(signal.dump()));  // something new to checkpoint
  t.durable();
  t.runner->checkpoint();
  t.durable();
  auto cp2 = t.frames<proto::checkpoint>().back();
  t.restore(cp2);
  t.env.lines.clear();
  t.runner->on_message(3, 1, 40, text(signal.dump()));  // now handled as new (and dropped)
  CHECK(t.env.lines.size() == 1);
}

TEST_CASE("a signal with an idempotency key is taken once: a retry is answered as a duplicate, "
          "also after a recovery from the log or a checkpoint and after the run ended") {
  rig t;  // retention: one hour
  t.call(1, "start", {{"id", "waits"}, {"type", "waiter"}, {"input", json::object()}});
  json other{{"id", "waits"}, {"name", "other"}, {"payload", 7}, {"key", "k1"}};
  t.call(2, "signal", other);
  auto first = t.answer(2);
  CHECK(first["delivered"] == true);
  CHECK(first["duplicate"] == false);
  t.call(3, "signal", other);
  auto again = t.answer(3);
  CHECK(again["delivered"] == true);
  CHECK(again["duplicate"] == true);
  // The same payload written otherwise is the same signal; another payload or name under the key
  // is refused, and nothing is delivered.
  t.call(31, "signal", {{"id", "waits"}, {"name", "other"}, {"payload", 7.0}, {"key", "k1"}});
  CHECK(t.answer(31)["code"] == "conflict");
  t.call(32, "signal", {{"id", "waits"}, {"name", "go"}, {"payload", 7}, {"key", "k1"}});
  auto reused = t.answer(32);
  CHECK(reused["code"] == "conflict");
  CHECK(reused["error"].get<std::string>().find("'k1'") != std::string::npos);
  t.call(33, "start", {{"id", "obj"}, {"type", "waiter"}, {"input", json::object()}});
  t.call(34, "signal",
         {{"id", "obj"}, {"name", "o"}, {"payload", {{"a", 1}, {"b", 2}}}, {"key", "k"}});
  CHECK(t.answer(34)["duplicate"] == false);
  t.runner->on_call(35, "signal",
                    text(R"({"id":"obj","name":"o","payload":{"b":2,"a":1},"key":"k"})"));
  CHECK(t.answer(35)["duplicate"] == true);
  auto pending = [&](uint64_t relay) {
    t.call(relay, "describe", {{"id", "waits"}});
    return t.answer(relay)["pending_signals"].size();
  };
  CHECK(pending(4) == 1);

  // A retry that comes before the signal it repeats is durable is answered once that is.
  t.call(41, "signal", {{"id", "waits"}, {"name", "other"}, {"payload", 9}, {"key", "k9"}});
  t.call(42, "signal", {{"id", "waits"}, {"name", "other"}, {"payload", 9}, {"key", "k9"}});
  t.append();
  CHECK(!t.reply(41));
  CHECK(!t.reply(42));
  CHECK(t.answer(42)["duplicate"] == true);
  CHECK(pending(43) == 2);

  // Another key, or the same key for another run, is a signal of its own.
  t.call(5, "signal", {{"id", "waits"}, {"name", "other"}, {"payload", 8}, {"key", "k2"}});
  CHECK(t.answer(5)["duplicate"] == false);
  t.call(6, "start", {{"id", "also"}, {"type", "waiter"}, {"input", json::object()}});
  t.call(7, "signal", {{"id", "also"}, {"name", "other"}, {"payload", 7}, {"key", "k1"}});
  CHECK(t.answer(7)["duplicate"] == false);
  CHECK(pending(8) == 3);

  // A recovery from the log knows the keys.
  t.recover(t.journal);
  t.call(9, "signal", other);
  CHECK(t.answer(9)["duplicate"] == true);
  CHECK(pending(10) == 3);

  // So does one from a checkpoint, also for a signal its run has taken since: the retry of the
  // signal that ended the run is a duplicate, not a signal to a finished run.
  json go{{"id", "waits"}, {"name", "go"}, {"payload", "done"}, {"key", "k3"}};
  t.call(11, "signal", go);
  CHECK(t.answer(11)["duplicate"] == false);
  t.call(12, "result", {{"id", "waits"}});
  CHECK(t.answer(12)["result"] == "done");
  t.runner->checkpoint();
  t.durable();
  auto cp = t.frames<proto::checkpoint>().at(0);
  t.restore(cp);
  t.call(13, "signal", go);
  auto late = t.answer(13);
  CHECK(late["delivered"] == true);
  CHECK(late["duplicate"] == true);
  t.call(14, "signal", {{"id", "waits"}, {"name", "go"}, {"key", "k4"}});
  CHECK(t.answer(14)["code"] == "finished");

  // Without a key, a retry is delivered again (unchanged).
  t.call(15, "signal", {{"id", "also"}, {"name", "x"}});
  t.call(16, "signal", {{"id", "also"}, {"name", "x"}});
  CHECK(t.answer(16).count("duplicate") == 0);
  t.call(17, "describe", {{"id", "also"}});
  CHECK(t.answer(17)["pending_signals"].size() == 3);

  // A key that could not be a header's value is refused.
  for (json bad : {json(""), json(std::string(257, 'k')), json("a\nb"), json(5)}) {
    t.call(18, "signal", {{"id", "also"}, {"name", "x"}, {"key", bad}});
    CHECK(t.answer(18)["code"] == "bad_request");
  }
}

TEST_CASE("a signal's idempotency key is kept for the retention period and forgotten with its "
          "run") {
  rig t;  // retention: one hour
  t.call(1, "start", {{"id", "w"}, {"type", "waiter"}, {"input", {{"wait_ms", 36000000}}}});
  json sig{{"id", "w"}, {"name", "other"}, {"key", "k"}};
  t.call(2, "signal", sig);
  CHECK(t.answer(2)["duplicate"] == false);
  t.env.now += 3599999;
  t.runner->checkpoint();
  t.durable();
  auto cp = t.frames<proto::checkpoint>().at(0);
  t.restore(cp);
  t.call(3, "signal", sig);
  CHECK(t.answer(3)["duplicate"] == true);  // within the period, from the checkpoint
  t.env.now += 1;
  t.call(4, "signal", {{"id", "w"}, {"name", "new"}});  // something new to checkpoint
  t.durable();
  t.runner->checkpoint();
  t.durable();
  auto cp2 = t.frames<proto::checkpoint>().back();
  t.restore(cp2);
  t.call(5, "signal", sig);
  CHECK(t.answer(5)["duplicate"] == false);  // past it: taken as new

  // A run forgotten (its retention over) takes its keys along, also in a recovery from the log
  // alone: a new run of the id hears a signal with an old key.
  rig r;
  r.call(1, "start", {{"id", "old"}, {"type", "waiter"}, {"input", json::object()}});
  r.call(2, "signal", {{"id", "old"}, {"name", "go"}, {"key", "k"}});
  r.call(3, "result", {{"id", "old"}});
  CHECK(r.answer(3)["status"] == "completed");
  r.env.now += 3600000;
  r.runner->checkpoint();  // journals the forgetting
  r.durable();
  r.call(4, "start", {{"id", "old"}, {"type", "waiter"}, {"input", json::object()}});
  CHECK(r.answer(4)["existing"] == false);
  r.recover(r.journal);
  r.call(5, "signal", {{"id", "old"}, {"name", "go"}, {"key", "k"}});
  CHECK(r.answer(5)["duplicate"] == false);
}

TEST_CASE("an IDLE's missing types are cut to what fits the smallest frame a node may have") {
  auto body_size = [](const std::vector<proto::idle_entry>& entries) {
    proto::bytes frame;
    proto::append_frame(frame,
                        proto::any_message{proto::idle{
                            proto::request_head{1, proto::no_shard, proto::epoch_t{0}}, entries}});
    return frame.size() - proto::frame_header_size;
  };
  // 10,000 shards (an invocation's most at 1 MiB frames), the widest numbers, each shard with two
  // 100-byte types: about 2 MiB of types.
  proto::idle_entry widest{proto::shard_id{UINT32_MAX},
                           proto::epoch_t{UINT64_MAX},
                           proto::idle_busy | proto::idle_expired,
                           UINT64_MAX,
                           UINT64_MAX,
                           UINT64_MAX,
                           {std::string(100, 'a'), std::string(100, 'b')}};
  std::vector<proto::idle_entry> entries(10'000, widest);
  CHECK(body_size(entries) > (size_t{1} << 20));
  CHECK(worker::fit_idle_types(entries) > 0);
  CHECK(body_size(entries) <= (size_t{1} << 20));
  // a type per shard at a time: room for about 5,400 first types and no second one
  CHECK(entries.front().types == std::vector<std::string>{std::string(100, 'a')});
  CHECK(entries.back().types.empty());
  // 5,000 shards: room for every shard's first type and for the second of the first ~2,700, so
  // no shard is left without a type (before, the last ~2,300 kept none)
  std::vector<proto::idle_entry> half(5'000, widest);
  CHECK(worker::fit_idle_types(half) == 2'300);
  CHECK(body_size(half) <= (size_t{1} << 20));
  CHECK(half.front().types.size() == 2);
  CHECK(half.back().types == std::vector<std::string>{std::string(100, 'a')});
  CHECK(std::all_of(half.begin(), half.end(), [](auto& e) { return !e.types.empty(); }));
  // One shard with 20,000 types among 1,000: the others keep theirs, it keeps what room is left
  // (8,528), and the rounds cost its types, not 20,000 passes over every shard.
  proto::idle_entry one_type = widest;
  one_type.types = {std::string(100, 'c')};
  std::vector<proto::idle_entry> uneven(1'000, one_type);
  uneven[0].types.assign(20'000, std::string(100, 'd'));
  CHECK(worker::fit_idle_types(uneven) == 20'000 - 1 - 8'528);
  CHECK(uneven[0].types.size() == 1 + 8'528);
  CHECK(std::all_of(uneven.begin() + 1, uneven.end(), [](auto& e) { return e.types.size() == 1; }));
  // The same shards with no type, and a few shards with short types, lose nothing.
  widest.types.clear();
  std::vector<proto::idle_entry> bare(10'000, widest);
  CHECK(worker::fit_idle_types(bare) == 0);
  CHECK(body_size(bare) <= (size_t{1} << 20));
  widest.types = {"order", "invoice"};
  std::vector<proto::idle_entry> few(3, widest);
  CHECK(worker::fit_idle_types(few) == 0);
  CHECK(few[2].types.size() == 2);
}

TEST_CASE("a workflow looping over steps parks once max_records_ahead of the shard's records are "
          "not yet durable, goes on as DURABLEs come, and completes with each body run once") {
  rig t;
  t.bound_records(10);
  t.start_loop(1, "l", 35);
  // Its start and 9 steps: 10 records not yet durable, and the 10th step waits.
  CHECK(t.runner->last_lsn() == 10);
  CHECK(t.b.of("l", "loop") == 9);
  t.runner->tick();  // still 10 not durable: nothing runs
  CHECK(t.b.of("l", "loop") == 9);
  CHECK_FALSE(t.runner->quiet());
  CHECK(t.runner->next_due_ms() == t.env.now);  // an IDLE now would say the shard is due
  // Its answer leaves once the records it saw are durable (answer() makes them so).
  t.call(2, "describe", {{"id", "l"}});
  auto described = t.answer(2);
  CHECK_MESSAGE(described.value("current", "")
                        .find("waits: 10 of the shard's records are not "
                              "yet durable") != std::string::npos,
                described.dump());
  // With all of them durable the next turn runs steps until 10 wait again.
  CHECK(t.b.of("l", "loop") == 9);
  CHECK(t.runner->next_wake_ms() == t.env.now);
  t.runner->tick();
  CHECK(t.b.of("l", "loop") == 19);
  t.durable_turns_until([&] { return t.b.of("l", "loop") >= 35; }, 10);
  CHECK(t.b.of("l", "loop") == 35);
  t.call(3, "result", {{"id", "l"}});
  CHECK(t.answer(3)["status"] == "completed");
  CHECK(t.reply(1).has_value());  // the start's answer, taken
  CHECK(t.runner->quiet());
}

TEST_CASE("a start whose id is over 256 bytes or holds a control character is refused, as the "
          "HTTP API refuses it: no run that one way cannot reach") {
  rig t;
  uint64_t relay = 1;
  for (std::string id : {std::string(257, 'x'), std::string{"bad\nid"}, std::string{"del\x7f"}}) {
    t.call(relay, "start", {{"id", id}, {"type", "pair"}, {"input", json::object()}});
    t.durable();
    auto r = t.reply(relay++);
    REQUIRE(r.has_value());
    CHECK_FALSE(r->ok);
    auto body = json::parse(r->body.begin(), r->body.end());
    CHECK(body["code"] == "bad_request");
  }
  CHECK(t.runner->last_lsn() == 0);  // nothing journaled
  t.call(relay, "start",
         {{"id", std::string(256, 'x')}, {"type", "pair"}, {"input", json::object()}});
  CHECK(t.answer(relay)["status"] == "completed");
}

TEST_CASE("a signal sent after its child's start names that start, and a receiver without the "
          "run takes it only once it took the start: a lost first start cannot lose the signal") {
  rig t;
  t.call(1, "start", {{"id", "s"}, {"type", "starter"}, {"input", json::object()}});
  t.durable();
  auto sent = t.frames<proto::relay>();
  REQUIRE(sent.size() == 3);  // all at once, as before: no round trip added
  auto payload = [](const proto::relay& r) {
    return json::parse(r.payload.begin(), r.payload.end());
  };
  CHECK(payload(sent[0])["kind"] == "start");
  CHECK(payload(sent[1])["kind"] == "signal");
  CHECK(payload(sent[1])["after"] == sent[0].outbox_id);
  CHECK_FALSE(payload(sent[2]).contains("after"));  // nothing unacknowledged for "someone"

  // The receiver (another shard's runner) gets the signal first: the start was lost.
  rig r;
  auto acks = [&] { return r.frames<proto::message_ack>().size(); };
  r.runner->on_message(3, 1, sent[1].outbox_id, sent[1].payload);
  r.durable();
  CHECK(acks() == 0);  // not taken, not acknowledged: the sender sends it again
  CHECK(r.runner->last_lsn() == 0);
  r.runner->on_message(3, 1, sent[0].outbox_id, sent[0].payload);  // the start, resent
  r.durable();
  CHECK(acks() == 1);
  r.runner->on_message(3, 1, sent[1].outbox_id, sent[1].payload);  // the signal, resent
  r.durable();
  CHECK(acks() == 2);
  r.call(9, "result", {{"id", "kid"}, {"wait_ms", 10000}});
  CHECK(r.answer(9)["result"] == 1);  // the waiter got "go"
  // A signal for a run this shard does not have, after nothing (or after a message it took),
  // is dropped and acknowledged, as before.
  r.runner->ready_frames().clear();
  json stray{{"kind", "signal"},
             {"workflow", "nobody"},
             {"name", "go"},
             {"payload", 1},
             {"after", sent[0].outbox_id}};
  r.runner->on_message(3, 1, 99, text(stray.dump()));
  r.durable();
  CHECK(acks() == 1);
}

TEST_CASE("a message over the journal's limit throws into the workflow and is neither journaled "
          "nor sent: its record could never be appended") {
  rig t;
  t.call(1, "start", {{"id", "b"}, {"type", "big_sender"}, {"input", {{"bytes", 100u << 20}}}});
  auto out = t.answer(1);
  REQUIRE(out["status"] == "completed");
  CHECK(out["result"].get<std::string>().rfind("send: its message of ", 0) == 0);
  CHECK(out["result"].get<std::string>().find("bytes is over the journal's limit of") !=
        std::string::npos);
  CHECK(t.frames<proto::relay>().empty());
  for (auto& r : t.journal)
    CHECK(r.size() < proto::max_record_size);
  t.call(2, "start", {{"id", "c"}, {"type", "big_sender"}, {"input", {{"bytes", 1000}}}});
  CHECK(t.answer(2)["result"] == "");
  CHECK(t.frames<proto::relay>().size() == 1);
}

TEST_CASE("start_child with an id the HTTP API could not reach throws into the workflow, starts "
          "nothing, journals nothing for it and replays the same") {
  rig t;
  t.call(1, "start", {{"id", "p"}, {"type", "parent"}, {"input", {{"child", "bad\nkid"}}}});
  t.durable();
  auto out = t.answer(1);
  REQUIRE(out["status"] == "completed");
  CHECK(out["result"]["error"] ==
        "start_child: the child's workflow id must not contain control characters (the HTTP API "
        "could not reach it)");
  CHECK(t.frames<proto::relay>().empty());
  // The replay takes the same path: the random() after it is still operation 1, as journaled.
  t.recover(t.journal);
  t.call(2, "result", {{"id", "p"}});
  CHECK(t.answer(2)["result"] == out["result"]);
  t.call(3, "describe", {{"id", "p"}});
  CHECK(t.answer(3)["status"] == "completed");
  // A good id starts the child.
  t.call(4, "start", {{"id", "q"}, {"type", "parent"}, {"input", {{"child", "kid"}}}});
  t.durable();
  CHECK(t.answer(4)["result"]["error"] == "");
  REQUIRE(t.frames<proto::relay>().size() == 1);
}

TEST_CASE(
    "describe lists a running run's latest 100 steps, in order, and counts the earlier ones") {
  rig t;
  t.bound_records(160);
  t.start_loop(1, "l", 1000);
  REQUIRE(t.b.of("l", "loop") == 159);  // its start and 159 steps, then it parks
  t.call(2, "describe", {{"id", "l"}});
  auto d = t.answer(2);
  REQUIRE(d["steps"].size() == describe_steps);
  CHECK(d["steps"][0]["name"] == "s59");
  CHECK(d["steps"][99]["name"] == "s158");
  CHECK(d["steps"][99]["value"] == 159);
  CHECK(d["steps_omitted"] == 59);
  CHECK(d["operations"] == 159);
  rig small;
  small.bound_records(4);  // 3 steps, then it parks
  small.start_loop(1, "short", 10);
  small.call(2, "describe", {{"id", "short"}});
  auto few = small.answer(2);
  CHECK(few["steps"].size() == 3);
  CHECK_FALSE(few.contains("steps_omitted"));
}

TEST_CASE("a step parked for the backlog does not run once its shard is leaving, nor keeps the "
          "shard from being quiet: the next holder runs it") {
  rig t;
  t.bound_records(4);
  t.start_loop(1, "l", 10);
  CHECK(t.b.of("l", "loop") == 3);
  t.durable();
  CHECK(t.reply(1).has_value());  // (taken, so that only the parked step could keep it busy)
  t.runner->leave();
  t.durable();
  t.runner->tick();
  CHECK(t.b.of("l", "loop") == 3);
  CHECK(t.runner->quiet());
  // The next holder goes on from the journal: the three steps are not run again.
  t.settings.max_records_ahead = 4096;
  t.recover(t.journal);
  CHECK(t.b.of("l", "loop") == 10);
  t.call(2, "result", {{"id", "l"}});
  CHECK(t.answer(2)["status"] == "completed");
}

TEST_CASE("a shard that is leaving fires no timer, time-out or step retry and resends nothing, "
          "but still reports them due: the next holder runs them") {
  rig t;
  t.call(1, "start", {{"id", "w"}, {"type", "waiter"}, {"input", {{"sleep_ms", 1000}}}});
  t.call(2, "start", {{"id", "f"}, {"type", "flaky"}, {"input", {{"fails", 1}}}});
  t.call(3, "start", {{"id", "s"}, {"type", "sender"}, {"input", json::object()}});
  t.durable();
  CHECK(t.b.of("f", "call") == 1);  // failed once, its retry due in 50-100 ms
  t.runner->ready_frames().clear();
  t.runner->leave();
  auto lsn = t.runner->last_lsn();
  t.env.now += 60000;  // past the sleep, the retry and the outbox's resend
  // Still due (an invoked worker's IDLE says BUSY: the server hands the shard back at once)...
  CHECK(t.runner->leaving());
  CHECK(t.runner->next_wake_ms() <= t.env.now);
  // ...but nothing runs here.
  t.runner->tick();
  CHECK(t.runner->last_lsn() == lsn);
  CHECK(t.b.of("f", "call") == 1);
  CHECK(t.frames<proto::relay>().empty());
  CHECK(t.runner->next_due_ms() <= t.env.now);
  // The next holder goes on from the journal.
  t.recover(t.journal);
  t.runner->tick();
  t.durable();
  CHECK(t.b.of("f", "call") == 2);
}

TEST_CASE("two loops on one shard take turns past the bound, operation by operation, and a run "
          "started while another is parked waits behind it") {
  rig t;
  t.bound_records(10);
  t.start_loop(1, "a", 1000);
  CHECK(t.b.of("a", "loop") == 9);  // its start and 9 steps: a parks
  t.durable();
  t.start_loop(2, "b", 1000);
  CHECK(t.b.of("b", "loop") == 0);  // b's first step waits behind a's, parked before it
  // Each turn runs the parked operations first parked first; a run's next one parks behind the
  // others, so a and b alternate until the bound (b's start is one of the 10 records).
  t.runner->tick();
  CHECK(t.b.of("a", "loop") == 14);
  CHECK(t.b.of("b", "loop") == 4);
  t.durable();
  t.runner->tick();
  CHECK(t.b.of("a", "loop") == 19);
  CHECK(t.b.of("b", "loop") == 9);
  t.durable();
  t.runner->tick();
  CHECK(t.b.of("a", "loop") == 24);
  CHECK(t.b.of("b", "loop") == 14);
}

TEST_CASE("a run cancelled while its step is parked leaves the shard quiet once its records are "
          "durable, and the step never runs") {
  rig t;
  t.bound_records(4);
  t.start_loop(1, "l", 10);
  CHECK(t.b.of("l", "loop") == 3);
  t.call(2, "cancel", {{"id", "l"}});
  CHECK(t.answer(2)["status"] == "cancelled");
  CHECK(t.reply(1).has_value());
  t.runner->tick();
  CHECK(t.b.of("l", "loop") == 3);
  CHECK(t.runner->quiet());
  CHECK(t.runner->next_wake_ms() == UINT64_MAX);  // nothing to wake for
}

TEST_CASE("a loop of now(), random(), sleep(0), wait_for(0) or send() parks at max_records_ahead "
          "too, and completes as DURABLEs come") {
  for (std::string op : {"now", "random", "sleep0", "wait0", "send"}) {
    CAPTURE(op);
    rig t;
    t.bound_records(10);
    t.call(1, "start", {{"id", "s"}, {"type", "spin"}, {"input", {{"n", 40}, {"op", op}}}});
    // Each operation writes one record (sleep and wait_for two: the timer, then its end).
    CHECK(t.b.of("s", "spin") < 10);
    CHECK(t.runner->last_lsn() >= 10);
    CHECK(t.runner->last_lsn() <= 11);
    CHECK_FALSE(t.runner->quiet());
    t.call(2, "describe", {{"id", "s"}});
    auto described = t.answer(2);
    CHECK_MESSAGE(
        described.value("current", "").find("of the shard's records are not yet durable") !=
            std::string::npos,
        described.dump());
    int before = t.b.of("s", "spin");
    t.runner->tick();
    CHECK(t.b.of("s", "spin") > before);  // durable now (answer() made it so): it goes on
    t.durable_turns_until([&] { return t.b.of("s", "spin") >= 40; }, 50);
    CHECK(t.b.of("s", "spin") == 40);
    t.call(3, "result", {{"id", "s"}});
    CHECK(t.answer(3)["status"] == "completed");
  }
}

TEST_CASE("timers, wait time-outs and step retries that come due together write their records "
          "within max_records_ahead too: the rest park until DURABLEs come") {
  for (std::string kind : {"sleep", "wait", "retry"}) {
    CAPTURE(kind);
    rig t;
    t.bound_records(4);
    for (int i = 0; i < 6; ++i) {
      std::string id = "r" + std::to_string(i);
      if (kind == "retry")
        t.call(i + 1, "start", {{"id", id}, {"type", "flaky"}, {"input", {{"fails", 1}}}});
      else
        t.call(i + 1, "start",
               {{"id", id},
                {"type", "waiter"},
                {"input", {{"sleep_ms", kind == "sleep" ? 1000 : 0}, {"wait_ms", 1000}}}});
      t.durable();
    }
    uint64_t before = t.runner->last_lsn();
    t.env.now += 1000;  // every timer, time-out and retry (at most 100 ms) is due
    t.runner->tick();
    // Each run's due record and what it writes next (a sleeper its wait's timer; a timed-out
    // waiter its step "after" and its end; a retried step its end) until 4 wait for the disk.
    CHECK(t.runner->last_lsn() - t.runner->durable_lsn() == 4);
    CHECK(t.runner->last_lsn() == before + 4);
    t.call(100, "describe", {{"id", "r5"}});
    auto described = t.answer(100);
    CHECK_MESSAGE(described.value("current", "")
                          .find("of the shard's records are not yet "
                                "durable") != std::string::npos,
                  described.dump());
    uint64_t each = kind == "wait" ? 3 : 2;
    t.durable_turns_until([&] { return t.runner->last_lsn() >= before + 6 * each; }, 10);
    t.durable();
    t.runner->tick();
    CHECK(t.runner->last_lsn() == before + 6 * each);  // every run went on, each once
    if (kind == "retry")
      for (int i = 0; i < 6; ++i)
        CHECK(t.b.of("r" + std::to_string(i), "call") == 2);  // the failed try and the retry
  }
}

TEST_CASE("a loop of steps parks once the worker's loop has had its turn and goes on at the next "
          "tick, so the loop reads its connection between steps, and each body runs once") {
  rig t;
  t.env.turn_checks_left = 3;  // three operations, then the turn is over
  t.start_loop(1, "l", 10);
  CHECK(t.b.of("l", "loop") == 3);
  CHECK(t.runner->next_wake_ms() == t.env.now);  // the loop comes back at once
  t.durable();
  CHECK(t.reply(1).has_value());  // the start is answered without waiting for every step
  t.env.turn_checks_left = 3;     // the next turn
  t.runner->tick();
  CHECK(t.b.of("l", "loop") == 6);
  t.env.turn_checks_left = -1;
  t.runner->tick();
  CHECK(t.b.of("l", "loop") == 10);
  t.call(2, "result", {{"id", "l"}});
  CHECK(t.answer(2)["status"] == "completed");
}

TEST_CASE("without the bound (max_records_ahead = 0) a loop of ready operations runs in one go") {
  rig t;
  t.bound_records(0);
  t.call(1, "start", {{"id", "s"}, {"type", "spin"}, {"input", {{"n", 40}, {"op", "now"}}}});
  CHECK(t.b.of("s", "spin") == 40);
}

TEST_CASE("operations a run does not co_await are still all written, in order, past the bound, "
          "and leave nothing parked") {
  rig t;
  t.bound_records(4);
  t.call(1, "start", {{"id", "c"}, {"type", "careless"}, {"input", {{"n", 10}}}});
  CHECK(t.b.of("c", "careless") == 10);
  // The start, ten now()s (each parked one done when the next is asked for, the last at the
  // run's end) and its end.
  CHECK(t.runner->last_lsn() == 12);
  t.call(2, "result", {{"id", "c"}});
  CHECK(t.answer(2)["status"] == "completed");
  CHECK(t.reply(1).has_value());
  CHECK(t.runner->quiet());
  CHECK(t.runner->next_wake_ms() == UINT64_MAX);
}

TEST_CASE("steps a run does not co_await each run their own body once, journaled under their own "
          "names, past the bound") {
  rig t;
  t.bound_records(4);
  t.call(1, "start", {{"id", "c"}, {"type", "careless"}, {"input", {{"n", 6}, {"steps", true}}}});
  CHECK(t.runner->last_lsn() == 8);  // the start, six steps, the end
  for (int i = 0; i < 6; ++i)
    CHECK(t.b.of("c", "s" + std::to_string(i)) == 1);
  t.call(2, "result", {{"id", "c"}});
  CHECK(t.answer(2)["status"] == "completed");
  // A replay finds each step's record where the code asks for it: no body runs again, nothing
  // diverges.
  t.recover(t.journal);
  t.call(3, "describe", {{"id", "c"}});
  auto described = t.answer(3);
  CHECK(described["status"] == "completed");
  for (int i = 0; i < 6; ++i)
    CHECK(t.b.of("c", "s" + std::to_string(i)) == 1);
  CHECK(t.runner->quiet());
}
