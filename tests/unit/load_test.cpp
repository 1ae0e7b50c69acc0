// `fusee load`'s parts: the latency histogram's error bound, the scenario files, the summary, and
// the end-of-run check against a fake server.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include "integration/raw_socket.hpp"
#include "load/checker.hpp"
#include "load/latency_histogram.hpp"
#include "load/local_server.hpp"
#include "load/observations.hpp"
#include "load/scenario.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"

using namespace fusee::load;

TEST_CASE("the latency histogram's percentiles are never below and at most 0.79 % above exact") {
  latency_histogram h;
  std::mt19937_64 rng{42};
  std::vector<uint64_t> values;
  std::lognormal_distribution<double> dist(13.0, 2.0);  // about 0.4 ms, spread over decades
  for (int i = 0; i < 100000; ++i) {
    auto v = static_cast<uint64_t>(dist(rng));
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0}) {
    auto rank = std::max<size_t>(1, static_cast<size_t>(std::ceil(q * double(values.size()))));
    auto exact = values[rank - 1];
    auto got = h.percentile(q);
    CHECK(got >= exact);
    CHECK(double(got) <= double(exact) * (1 + h.relative_error()) + 1);
  }
  CHECK(h.max() == values.back());
  CHECK(h.min() == values.front());
  CHECK(h.count() == values.size());
  CHECK(h.percentile(1.0) == values.back());  // clamped to the largest value seen
}

TEST_CASE("small values are exact, merging adds counts, an empty histogram reports zeros") {
  latency_histogram a, b;
  CHECK(a.percentile(0.5) == 0);
  CHECK(a.max() == 0);
  for (uint64_t v = 0; v < 100; ++v)
    a.record(v);
  CHECK(a.percentile(0.5) == 49);  // below 2^7: one bucket per value
  b.record(1000000);
  a.merge(b);
  CHECK(a.count() == 101);
  CHECK(a.max() == 1000000);
  CHECK(a.min() == 0);
  CHECK(a.percentile(1.0) == 1000000);
  a.record(UINT64_MAX);  // the top of the range has a bucket too
  CHECK(a.percentile(1.0) == UINT64_MAX);
}

namespace {

std::string scenario_error(const std::string& text) {
  auto file = std::filesystem::temp_directory_path() / "fusee-scenario-test.toml";
  std::ofstream(file) << text;
  std::string err;
  auto s = load_scenario(file.string(), &err);
  CHECK_FALSE(s.has_value());
  return err.substr(err.find(':') + 1);  // without the file name
}

}  // namespace

TEST_CASE("a scenario file: defaults, every key read, mistakes named with line and key") {
  auto file = std::filesystem::temp_directory_path() / "fusee-scenario-ok.toml";
  std::ofstream(file) << "[run]\nname = \"t\"\nduration_s = 2.5\n[workers]\ncount = 3\n"
                         "[clients]\nrate = 50\n[workflow]\nsteps = 7\nsleep_ms = 20\n";
  std::string err;
  auto s = load_scenario(file.string(), &err);
  REQUIRE_MESSAGE(s.has_value(), err);
  CHECK(s->name == "t");
  CHECK(s->duration_s == 2.5);
  CHECK(s->workers == 3);
  CHECK(s->rate == 50);
  CHECK(s->steps == 7);
  CHECK(s->sleep_ms == 20);
  CHECK(s->connections == 2);  // a default
  CHECK(to_toml(*s).find("[workflow]\nsteps = 7\n") != std::string::npos);

  CHECK(scenario_error("[run]\nduraton_s = 3\n") == "2: unknown key `run.duraton_s`");
  CHECK(scenario_error("[clients]\nconnections = 0\n") ==
        "2: `clients.connections` must be a number from 1 to 10000");
  CHECK(scenario_error("[workflow]\nsteps = 2.5\n") ==
        "2: `workflow.steps` must be a whole number");
  CHECK(scenario_error("[run]\nname = 3\n") == "2: `run.name` must be a string");
  CHECK(scenario_error("run = 3\n") == "1: `run` must be a table");
  CHECK(scenario_error("[run]\nrestart_before_check = 1\n") ==
        "2: `run.restart_before_check` must be true or false");
  CHECK(scenario_error("[run\n").find("1:") == 0);  // TOML syntax, with its line
  // Rules between keys name both.
  CHECK(scenario_error("[clients]\nmode = \"half\"\n") ==
        " `clients.mode` must be \"open\" or \"closed\", not \"half\"");
  CHECK(scenario_error("[workflow]\nsleep_ms = 5\nwake_at_s = 3\n") ==
        " `workflow.sleep_ms` and `workflow.wake_at_s` cannot both be set");
  CHECK(scenario_error("[clients]\nsignals = true\n[workflow]\nsteps = 0\n") ==
        " `clients.signals` needs `workflow.steps` of at least 1 (runs wait after it)");
}

TEST_CASE("--set overrides one key with the file's ranges and rules, a bare word as a string") {
  scenario s;
  CHECK(apply_setting(s, "workflow.wake_at_s=5").empty());
  CHECK(s.wake_at_s == 5);
  CHECK(apply_setting(s, "clients.mode=closed").empty());
  CHECK(s.mode == "closed");
  CHECK(apply_setting(s, "run.restart_before_check=true").empty());
  CHECK(s.restart_before_check);
  CHECK(apply_setting(s, "workflow.steps=65") ==
        "--set workflow.steps=65: `workflow.steps` must be a number from 0 to 64");
  CHECK(apply_setting(s, "workflow.stepz=3") ==
        "--set workflow.stepz=3: unknown key `workflow.stepz`");
  CHECK(apply_setting(s, "steps=3") ==
        "--set steps=3: write table.key=value (e.g. workflow.steps=5)");
  // A rule between keys: the setting is refused and the scenario is unchanged.
  CHECK(apply_setting(s, "workflow.sleep_ms=10") ==
        "--set workflow.sleep_ms=10: `workflow.sleep_ms` and `workflow.wake_at_s` cannot both be "
        "set");
  CHECK(s.sleep_ms == 0);
}

TEST_CASE("a failed run shows the server log's tail, after the head of a sanitizer report that "
          "began before it") {
  using fusee::load::log_excerpt;
  CHECK(log_excerpt("short log\n", 100) == "short log\n");
  std::string before(500, 'a'), after(500, 'z');
  // A report whose start is within the tail: the tail alone.
  std::string near = before + "\n==7==ERROR: AddressSanitizer: x\n" + std::string(20, 's');
  CHECK(log_excerpt(near, 100) == near.substr(near.size() - 100));
  // One that began earlier: its first line on, then the tail.
  std::string log =
      before + "\n==7==ERROR: AddressSanitizer: heap-use-after-free\n#0 frame\n" + after;
  auto e = log_excerpt(log, 100);
  CHECK(e.rfind("==7==ERROR: AddressSanitizer: heap-use-after-free\n#0 frame\n", 0) == 0);
  CHECK(e.find("\n[...]\n") != std::string::npos);
  CHECK(e.substr(e.size() - 100) == std::string(100, 'z'));
  // UBSan's reports too.
  auto u = log_excerpt(before + "\nfile.cpp:3:5: runtime error: signed overflow\n" + after, 100);
  CHECK(u.rfind("file.cpp:3:5: runtime error: signed overflow", 0) == 0);
}

TEST_CASE("a run counts as completed once both its start's answer and its end came, in either "
          "order and from racing threads, and only once") {
  observations obs{4, 1};
  CHECK(obs.run_completed(0));  // the run ended before the client heard its start's answer
  CHECK(obs.done == 0);         // so "completed" never runs ahead of "started"
  CHECK_FALSE(obs.run_completed(0));
  obs.start_answered_ok(0);
  CHECK(obs.ok == 1);
  CHECK(obs.done == 1);
  obs.start_answered_ok(1);  // the usual order
  CHECK(obs.done == 1);
  CHECK(obs.run_completed(1));
  CHECK(obs.done == 2);
  CHECK(obs.run_completed(2));  // a start never answered ok: not counted
  CHECK(obs.done == 2);
  for (int round = 0; round < 2000; ++round) {  // the answer and the end race
    observations o{1, 1};
    std::thread end{[&] { o.run_completed(0); }};
    o.start_answered_ok(0);
    end.join();
    REQUIRE(o.done == 1);
  }
}

TEST_CASE("the run's summary names the commonest refusals first and counts the reasons left out") {
  std::map<std::string, uint64_t> refusals{
      {"a rare one", 1}, {"ERR 9: no holder", 40}, {"timed out", 7}, {"b", 1}, {"c", 1}, {"d", 1}};
  auto lines = commonest_refusals(refusals, 3);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0] == "40 x ERR 9: no holder");
  CHECK(lines[1] == "7 x timed out");
  CHECK(lines[2] == "1 x a rare one");
  CHECK(lines[3] == "and 3 reasons more (\"refusals\" in the report)");
  CHECK(commonest_refusals({}, 5).empty());
  CHECK(commonest_refusals({{"x", 2}}, 5) == std::vector<std::string>{"2 x x"});
}

TEST_CASE("the end-of-run check stops asking a server that holds its answers once it is told to "
          "stop, and leaves those runs unknown") {
  // A server that greets the checker and then answers nothing (as one whose runs park would).
  fusee::test::loopback_listener listener;
  std::atomic<int> calls{0};
  std::thread silent([&] {
    int fd = listener.accept_one();
    if (fd < 0) return;
    fusee::proto::frame_decoder frames;
    uint8_t buf[4096];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) {
      frames.feed(buf, static_cast<size_t>(n));
      for (auto f = frames.next(); f && *f; f = frames.next()) {
        auto m = fusee::proto::decode_request((*f)->kind, (*f)->body);
        if (!m) continue;
        if (auto* hello = std::get_if<fusee::proto::client_hello>(&*m)) {
          auto ok = fusee::proto::encode(fusee::proto::make_client_hello_ok(hello->head.id, 16));
          ::send(fd, ok.data(), ok.size(), MSG_NOSIGNAL);
        } else {
          ++calls;
        }
      }
    }
    ::close(fd);
  });
  std::string err;
  auto fates = ask_fates("127.0.0.1:" + std::to_string(listener.port), {}, {"r1", "r2"},
                         std::chrono::steady_clock::now() + std::chrono::seconds(60), &err,
                         [&] { return calls == 2; });  // a stop once both calls are out
  CHECK(err.empty());
  REQUIRE(fates.size() == 2);
  for (auto& f : fates) {
    CHECK(f.status == "unknown");
    CHECK(f.detail == "not asked to the end: the run was stopped");
  }
  silent.join();  // the checker's connection closed when it returned
}
