#include "load/load_run.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include <sys/resource.h>
#include <unistd.h>

#include "client/address.hpp"
#include "load/checker.hpp"
#include "load/client_lane.hpp"
#include "load/interruption.hpp"
#include "load/latency_histogram.hpp"
#include "load/load_workflow.hpp"
#include "load/local_server.hpp"
#include "load/observations.hpp"
#include "load/sim_endpoint.hpp"
#include "protocol/auth.hpp"
#include "protocol/hex.hpp"
#include "worker/fleet.hpp"
#include "worker/session.hpp"

namespace fusee::load {

namespace {

namespace fs = std::filesystem;
using worker::json;

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double ms(uint64_t ns) {
  return double(ns) / 1e6;
}

json latency_json(const latency_histogram& h) {
  return json{{"count", h.count()},
              {"p50_ms", ms(h.percentile(0.5))},
              {"p90_ms", ms(h.percentile(0.9))},
              {"p99_ms", ms(h.percentile(0.99))},
              {"max_ms", ms(h.max())},
              {"mean_ms", h.mean() / 1e6}};
}

struct check {
  std::string name;
  bool ok;
  std::string detail;
};

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (auto& x : v)
    out += (out.empty() ? "" : ", ") + x;
  return out;
}

std::string fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

/// Sleeps until `at` or until `stop` is set (true: stopped).
class stopper {
public:
  bool sleep_until(clock_type::time_point at) {
    std::unique_lock lk{mtx_};
    return cv_.wait_until(lk, at, [&] { return stopped_; });
  }
  void stop() {
    {
      std::lock_guard lk{mtx_};
      stopped_ = true;
    }
    cv_.notify_all();
  }

private:
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

}  // namespace

int run_load(const scenario& s, const run_options& options) {
  auto say = [](const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
  };
  auto refuse = [](const std::string& why) {
    std::fprintf(stderr, "fusee load: %s\n", why.c_str());
    return 2;
  };
  bool tty = ::isatty(STDOUT_FILENO) != 0;
  auto planned = std::llround(s.duration_s * s.rate);
  constexpr long long max_starts = 10'000'000;  // ~300 MB of bookkeeping
  if (planned < 1 || planned > max_starts)
    return refuse("duration_s x rate = " + std::to_string(planned) +
                  " workflow starts; it must be 1 to " + std::to_string(max_starts));
  auto starts = static_cast<uint64_t>(planned);
  if ((s.restart_before_check || s.server_kills > 0) && !s.server.empty())
    return refuse("run.restart_before_check and chaos.server_kills need a server this tool "
                  "starts (not --server / run.server)");
  if (s.endpoints > 0 && !s.server.empty())
    return refuse("[endpoints] need a server this tool starts (its configuration names them), "
                  "not --server / run.server");
  if (s.worker_kill_every_s > 0 && s.workers == 0)
    return refuse("chaos.worker_kill_every_s needs long-lived workers (workers.count)");
  if (s.workers == 0 && s.endpoints == 0 && s.server.empty())
    return refuse("nothing would run the workflows: give workers.count (long-lived workers) or "
                  "endpoints.count (serverless ones)");
  if (!s.server.empty()) {  // host:port, or a cluster's nodes as "a:1,b:2": each once
    auto list = client::split_address_list(s.server);
    for (size_t i = 0; i < list.size(); ++i) {
      auto at = client::parse_host_port(list[i]);
      if (!at || at->port == 0)
        return refuse("the server address '" + list[i] + "' (in --server / run.server \"" +
                      s.server + "\") is not host:port with a port from 1 to 65535");
      if (std::find(list.begin(), list.begin() + i, list[i]) != list.begin() + i)
        return refuse("the server address " + list[i] +
                      " is given twice in --server / run.server \"" + s.server + "\"");
    }
  }
  // The report's place is checked now, not after a run it would lose.
  auto report_file = options.report_file.empty() ? "load-" + s.name + ".json" : options.report_file;
  {
    std::error_code ec;
    if (fs::is_directory(report_file, ec))
      return refuse("the report file " + report_file + " is a directory");
    auto dir = fs::path(report_file).has_parent_path() ? fs::path(report_file).parent_path()
                                                       : fs::path(".");
    if (!fs::is_directory(dir, ec) && !fs::create_directories(dir, ec))
      return refuse("cannot make the report's directory " + dir.string() + ": " + ec.message());
    if (::access(dir.c_str(), W_OK) != 0)
      return refuse("the report file " + report_file + " cannot be written in " + dir.string() +
                    ": " + std::strerror(errno));
  }
  // Ctrl-C or SIGTERM: the run stops early, says what it got and cleans up (its server and
  // temporary directory); a second one ends the tool at once.
  catch_interruptions();
  auto interrupted_exit = [&] {
    int sig = interrupted();
    std::fprintf(stderr, "fusee load: stopped by %s: the run is cut short, no checks, no report\n",
                 sig == SIGINT ? "SIGINT" : "SIGTERM");
    return 128 + sig;
  };

  observations obs(starts, s.shards);
  // Cold wakes are told apart only when no long-lived worker may hold a shard.
  obs.track_wakes = s.endpoints > 0 && s.workers == 0;
  auto types = workflows(&obs);
  auto on_step_durable = [&obs](const worker::step_durable& d) { obs.step_durable_now(d); };

  // The server, with the simulated endpoints in its configuration.
  std::unique_ptr<local_server> local;
  std::vector<std::unique_ptr<sim_endpoint>> endpoints;
  std::string server = s.server, admin;
  if (server.empty()) {
    local = std::make_unique<local_server>();
    if (auto err = local->prepare(); !err.empty()) return refuse(err);
    std::string toml = "[server]\n";
    if (s.endpoints > 0) {
      std::random_device rd;
      endpoint_behaviour b;
      b.fail_rate = s.fail_rate;
      b.hang_rate = s.hang_rate;
      b.hang_ms = s.budget_ms + 1000 + 1000;  // past budget + grace: the server times it out
      b.crash_rate = s.crash_rate;
      // Most invocations of a busy run last a few hundred ms: drop within that, or the dice
      // would mostly pick invocations that are gone by then.
      b.crash_within_ms = std::clamp(s.budget_ms / 2, 1u, 250u);
      auto key = proto::fresh_nonce();  // 32 hex digits of it: over client::min_secret_size
      b.secret = "load-" + proto::to_hex(key.data(), 16);
      b.on_step_durable = on_step_durable;
      b.on_run = [&obs](const std::vector<uint32_t>& shards, clock_type::time_point arrived) {
        return obs.invocation_began(shards, arrived);
      };
      b.on_ran = [&obs](uint64_t token, const std::vector<uint32_t>& shards, uint64_t lease_us) {
        obs.invocation_ended(token, shards, lease_us);
      };
      std::ofstream(local->dir() / "endpoint.secret") << b.secret << "\n";
      std::filesystem::permissions(local->dir() / "endpoint.secret",
                                   std::filesystem::perms::owner_read |
                                       std::filesystem::perms::owner_write);
      for (uint32_t e = 0; e < s.endpoints; ++e) {
        std::string err;
        auto ep = sim_endpoint::start(types, b, (uint64_t{rd()} << 32) | rd(), &err);
        if (!ep) return refuse("a simulated endpoint did not start: " + err);
        toml += "\n[[endpoint]]\nurl = \"http://127.0.0.1:" + std::to_string(ep->port()) +
                "/invoke\"\nsecret_file = \"" + (local->dir() / "endpoint.secret").string() +
                "\"\nconcurrency = " + std::to_string(s.endpoint_concurrency) +
                "\nbudget_ms = " + std::to_string(s.budget_ms) +
                "\nmax_shards = " + std::to_string(s.endpoint_max_shards) + "\ngrace_ms = 1000\n";
        endpoints.push_back(std::move(ep));
      }
    }
    if (auto err = local->start(options.fusee_binary, s.shards, toml); !err.empty())
      return interrupted() ? interrupted_exit() : refuse(err);
    server = local->listen();
    admin = local->admin();
  }
  auto metrics_before = scrape_metrics(admin);
  // A cluster's nodes ("a,b,c"): workers and client connections are spread over them in turn
  // (each worker holds shards of its node; calls for other nodes' shards are forwarded).
  auto nodes = client::split_address_list(server);

  // The workers: the real runtime, long-lived, many on each of a few threads (worker::fleet).
  std::vector<std::unique_ptr<worker::fleet>> fleets;
  std::vector<std::thread> fleet_threads;
  auto stop_workers = [&] {
    for (auto& f : fleets)
      f->stop();
    for (auto& t : fleet_threads)
      if (t.joinable()) t.join();
  };
  // What the workers said last (not printed: reconnects are part of chaos, not news), for a
  // connect that does not happen.
  struct last_said {
    std::mutex mu;
    std::string line;
    std::string log_failed;  ///< the first line saying the server's log failed (IO_FAILED)
  };
  auto said = std::make_shared<last_said>();
  if (s.workers > 0) {
    uint32_t threads = std::min(s.worker_threads, s.workers);
    std::vector<std::vector<worker::worker_options>> per(threads);
    for (uint32_t w = 0; w < s.workers; ++w) {
      worker::worker_options wo;
      wo.server = nodes[w % nodes.size()];
      wo.name = "load-worker-" + std::to_string(w);
      wo.max_shards = s.max_shards;
      wo.security = s.security;
      wo.runner.on_step_durable = on_step_durable;
      wo.log = [said](const std::string& line) {
        std::lock_guard lock(said->mu);
        said->line = line;
        // IO_FAILED to a holder in the failed batch, ERR to one whose request came after.
        if (said->log_failed.empty() &&
            (line.find(worker::server_log_failed) != std::string::npos ||
             line.find("the log failed earlier") != std::string::npos))
          said->log_failed = line;
      };
      per[w % threads].push_back(std::move(wo));
    }
    for (auto& p : per) {
      fleets.push_back(std::make_unique<worker::fleet>(types, std::move(p)));
      fleet_threads.emplace_back([f = fleets.back().get()] { f->run(); });
    }
  }
  auto workers_connected = [&] {
    size_t n = 0;
    for (auto& f : fleets)
      n += f->connected();
    return n;
  };
  auto connect_started = clock_type::now();
  auto log_failed = [&] {  // "" or what a worker said of the server's failed log
    std::lock_guard lock(said->mu);
    return said->log_failed;
  };
  auto said_last = [&] {  // "" or "; a worker said last: ..."
    std::lock_guard lock(said->mu);
    return said->line.empty() ? std::string{} : "; a worker said last: " + said->line;
  };
  bool told = false;  // a slow connect is said once, after 5 s, with what the workers say
  while (workers_connected() < s.workers) {
    if (interrupted()) {
      stop_workers();
      return interrupted_exit();
    }
    if (!told && clock_type::now() - connect_started > std::chrono::seconds(5)) {
      told = true;
      std::fprintf(stderr,
                   "fusee load: %zu of %u workers connected after 5 s (waiting up to 60 s)%s\n",
                   workers_connected(), s.workers, said_last().c_str());
    }
    if (clock_type::now() - connect_started > std::chrono::seconds(60)) {
      stop_workers();
      return refuse("only " + std::to_string(workers_connected()) + " of " +
                    std::to_string(s.workers) + " workers connected within 60 s" + said_last() +
                    (local ? "; the server's log:\n" + local->log_tail() : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // awaiting the connections
  }
  double connect_s = std::chrono::duration<double>(clock_type::now() - connect_started).count();
  // A server's start makes every unheld shard due once (recovery): those invocations end before
  // the schedule starts, or they would be measured as the first seconds' cold wakes.
  uint64_t startup_posts = 0, startup_ran = 0;
  if (!endpoints.empty()) {
    auto idle_since = clock_type::now();
    while (clock_type::now() - idle_since < std::chrono::milliseconds(500) &&
           clock_type::now() - connect_started < std::chrono::seconds(60) && !interrupted()) {
      for (auto& e : endpoints)
        if (e->in_flight > 0) idle_since = clock_type::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // awaiting a quiet spell
    }
    for (auto& e : endpoints) {
      startup_posts += e->posts;
      startup_ran += e->ran;
    }
  }

  // The clients.
  std::vector<std::unique_ptr<client_lane>> lanes;
  uint32_t shards = 0;
  for (uint32_t c = 0; c < s.connections; ++c) {
    lanes.push_back(std::make_unique<client_lane>(&obs, s, c, starts));
    if (auto err = lanes.back()->connect(nodes[c % nodes.size()], &shards); !err.empty()) {
      lanes.clear();
      stop_workers();
      return refuse("client " + std::to_string(c) + ": " + err +
                    (local ? "\nthe server's log:\n" + local->log_tail() : ""));
    }
  }
  char intro[512];
  std::snprintf(intro, sizeof(intro),
                "fusee load: scenario \"%s\": %s%llu workflows at %g/s over %g s, %u workers "
                "on %zu threads (connected in %.1f s), %u endpoint%s, %u client connections, "
                "server %s%s",
                s.name.c_str(), s.mode == "closed" ? "up to " : "", (unsigned long long)starts,
                s.rate, s.duration_s, s.workers, fleets.size(), connect_s, s.endpoints,
                s.endpoints == 1 ? "" : "s", s.connections, server.c_str(),
                local ? " (started here)" : "");
  say(intro);
  if (startup_posts > 0)
    say("fusee load: the server's start-up invocations (" + std::to_string(startup_posts) +
        ", every unheld shard once) ended before the schedule");

  double cpu0 = cpu_seconds();
  obs.set_t0(clock_type::now() + std::chrono::milliseconds(100));
  auto t0 = obs.t0();
  for (auto& l : lanes)
    l->start();
  auto schedule_end = t0 + std::chrono::nanoseconds(static_cast<int64_t>(s.duration_s * 1e9));

  // Chaos: kill -9 and restart the server at random times, one in each equal part of the
  // schedule (so they spread); kill random workers every few seconds. Workers and clients
  // reconnect by themselves.
  std::random_device rd;
  std::mt19937_64 rng((uint64_t{rd()} << 32) | rd());
  std::atomic<uint32_t> kills{0};
  std::vector<std::string> kill_errors;
  std::vector<double> kill_times;  // planned
  std::mutex kill_mtx;             // guards what the chaos thread reports
  std::vector<double> killed_at;   // carried out, seconds into the run
  stopper chaos_stop;
  std::thread chaos, worker_chaos;
  if (s.server_kills > 0 && local) {
    for (uint32_t k = 0; k < s.server_kills; ++k) {
      double part = s.duration_s / s.server_kills;
      kill_times.push_back(part * (k + 0.1 + 0.8 * std::uniform_real_distribution<>()(rng)));
    }
    chaos = std::thread([&] {
      for (double at : kill_times) {
        if (chaos_stop.sleep_until(t0 + std::chrono::nanoseconds(int64_t(at * 1e9)))) return;
        auto at_s = std::chrono::duration<double>(clock_type::now() - t0).count();
        auto err = local->restart();
        std::lock_guard lk{kill_mtx};
        if (!err.empty()) {
          kill_errors.push_back(err);
          return;
        }
        killed_at.push_back(at_s);
        kills++;
      }
    });
  }
  std::atomic<uint64_t> worker_kills{0};
  if (s.worker_kill_every_s > 0 && !fleets.empty())
    worker_chaos = std::thread([&, seed = rng()] {
      std::mt19937_64 r(seed);
      auto next = t0;
      for (;;) {
        next += std::chrono::nanoseconds(
            int64_t(s.worker_kill_every_s * 1e9 * std::uniform_real_distribution<>(0.5, 1.5)(r)));
        if (next >= schedule_end || chaos_stop.sleep_until(next)) return;
        auto& f = *fleets[r() % fleets.size()];
        f.kill(r() % f.size(), std::chrono::milliseconds(s.worker_down_ms));
        worker_kills++;
      }
    });

  // Progress until every start is sent and answered, every run completed and every signal
  // answered, or drain_s past the schedule.
  auto give_up = schedule_end + std::chrono::nanoseconds(static_cast<int64_t>(s.drain_s * 1e9));
  uint64_t last_ok = 0, last_done = 0, last_ran = 0, last_steps = 0;
  auto posts_ran = [&] {
    uint64_t n = 0;
    for (auto& e : endpoints)
      n += e->ran;
    return n;
  };
  last_ran = posts_ran();  // the start-up invocations are not the schedule's
  auto last = clock_type::now();
  double last_cpu = cpu0;
  int tick = 0;
  json timeline = json::array();
  std::vector<double> wakes_per_s;
  pid_t server_pid = local ? local->pid() : -1;
  // Every client connection down: said once it has lasted 2 s, and again when one is back.
  auto clients_down = [&] {  // "" unless every lane is down: then one's reason
    std::string why;
    for (auto& l : lanes)
      if ((why = l->down_reason()).empty()) return why;
    return why;
  };
  std::optional<clock_type::time_point> down_since;
  bool said_down = false;
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // pacing the progress line
    auto now = clock_type::now();
    if (auto why = clients_down(); why.empty()) {
      if (said_down)
        std::fprintf(stderr, "%sfusee load: the server answers again\n", tty ? "\n" : "");
      down_since.reset();
      said_down = false;
    } else if (!down_since) {
      down_since = now;
    } else if (!said_down && now - *down_since > std::chrono::seconds(2)) {
      said_down = true;
      std::fprintf(stderr,
                   "%sfusee load: no client connection for 2 s (%s); they keep trying until the "
                   "run's end\n",
                   tty ? "\n" : "", why.c_str());
    }
    if (auto failed = log_failed(); !failed.empty()) {  // nothing more can complete
      std::fprintf(stderr,
                   "%sfusee load: the server's log failed (a worker heard: %s); no run can go on "
                   "until it restarts: the run ends now\n",
                   tty ? "\n" : "", failed.c_str());
      break;
    }
    bool finished =
        obs.ok + obs.refused == obs.sent &&
        std::all_of(lanes.begin(), lanes.end(), [](auto& l) { return l->sender_done(); });
    for (uint64_t i = 0; finished && i < starts; ++i)
      finished = obs.answered[i] != 1 ||
                 (obs.completed[i] != 0 && (!s.signals || obs.signal_answered[i] != 0));
    if (finished || now > give_up || interrupted()) break;
    if (++tick % 4 != 0) continue;
    double dt = std::chrono::duration<double>(now - last).count();
    double elapsed = std::chrono::duration<double>(now - t0).count();
    uint64_t ran = posts_ran();
    double cpu = cpu_seconds();
    if (local) server_pid = local->pid();
    uint64_t rss = resident_bytes(server_pid);
    uint64_t in_flight = std::max<int64_t>(0, int64_t(obs.sent.load()) - int64_t(obs.done.load()) -
                                                  int64_t(obs.refused.load()));
    json sample;
    {  // one timeline sample a second: rates and the latencies of that second
      std::lock_guard<std::mutex> lk{obs.mtx};
      auto& h = obs.interval_start_latency;
      auto& d = obs.interval_step_durable;
      sample = {{"t_s", elapsed},
                {"starts_per_s", double(obs.ok - last_ok) / dt},
                {"completed_per_s", double(obs.done - last_done) / dt},
                {"steps_per_s", double(obs.step_runs - last_steps) / dt},
                {"invocations_per_s", double(ran - last_ran) / dt},
                {"in_flight", in_flight},
                {"errors", obs.refused.load()},
                {"workers_connected", workers_connected()},
                {"server_rss_mb", double(rss) / 1048576.0},
                {"tool_cpu_share", (cpu - last_cpu) / dt},
                {"start_p50_ms", ms(h.percentile(0.5))},
                {"start_p99_ms", ms(h.percentile(0.99))},
                {"start_max_ms", ms(h.max())},
                {"step_durable_p50_ms", ms(d.percentile(0.5))},
                {"step_durable_p99_ms", ms(d.percentile(0.99))}};
      h.clear();
      d.clear();
    }
    if (!endpoints.empty() && now < schedule_end)
      wakes_per_s.push_back(double(ran - last_ran) / dt);
    timeline.push_back(sample);
    char line[320];
    std::snprintf(line, sizeof(line),
                  "%6.1f/%g s  started %llu (%.0f/s)  completed %llu (%.0f/s)  in flight %llu  "
                  "errors %llu  step p99 %.1f ms%s",
                  elapsed, s.duration_s, (unsigned long long)obs.ok.load(),
                  double(obs.ok - last_ok) / dt, (unsigned long long)obs.done.load(),
                  double(obs.done - last_done) / dt, (unsigned long long)in_flight,
                  (unsigned long long)obs.refused.load(),
                  sample["step_durable_p99_ms"].get<double>(),
                  endpoints.empty()
                      ? ""
                      : ("  invocations " + fixed(double(ran - last_ran) / dt, 0) + "/s").c_str());
    last_ok = obs.ok;
    last_done = obs.done;
    last_ran = ran;
    last_steps = obs.step_runs;
    last_cpu = cpu;
    last = now;
    if (tty) {
      std::fputs(("\r\x1b[2K" + std::string(line)).c_str(), stdout);
      std::fflush(stdout);
    } else if (tick % 20 == 0) {  // every 5 s
      say(line);
    }
  }
  if (tty) std::fputs("\n", stdout);
  double wall = std::chrono::duration<double>(clock_type::now() - t0).count();
  double cpu = cpu_seconds() - cpu0;

  chaos_stop.stop();
  if (chaos.joinable()) chaos.join();
  if (worker_chaos.joinable()) worker_chaos.join();
  uint64_t client_reconnects = 0;
  std::string down_at_end = clients_down();
  for (auto& l : lanes) {
    l->stop();
    client_reconnects += l->reconnects();
  }
  // A stop from here on (the checks too) cuts the run short the same way.
  auto cut_short = [&] {
    stop_workers();
    for (auto& e : endpoints)
      e->stop();
    say("fusee load: " + std::to_string(obs.ok.load()) + " started, " +
        std::to_string(obs.done.load()) + " completed in " + fixed(wall, 1) + " s of " +
        fixed(s.duration_s, 1) + " when stopped");
    return interrupted_exit();
  };
  if (interrupted()) return cut_short();

  std::vector<check> checks;
  if (s.server_kills > 0)
    checks.push_back({"the server came back after every kill -9", kill_errors.empty(),
                      std::to_string(kills.load()) + " of " + std::to_string(s.server_kills) +
                          " kills and restarts" +
                          (kill_errors.empty() ? "" : ": " + kill_errors.front())});
  if (s.restart_before_check && local) {
    auto err = local->restart();
    if (interrupted()) return cut_short();
    checks.push_back({"the server restarts after kill -9", err.empty(),
                      err.empty() ? "restarted on the same data dir and ports" : err});
    if (err.empty())
      say("fusee load: killed the server (kill -9) and started it again on its data dir");
  }

  // Account for every start: completed here, or asked for its state now.
  uint64_t unanswered = 0, still_running = 0, lost = 0, failed = 0, unsent = 0, unchecked = 0;
  std::vector<std::string> running_ids, lost_ids, ask;
  std::string unchecked_reason;
  for (uint64_t i = 0; i < starts; ++i) {
    if (obs.intended[i] < 0) {
      unsent++;  // closed loop: the schedule ended first
      continue;
    }
    if (obs.answered[i] == 0) {
      unanswered++;
      continue;
    }
    // After a restart every acknowledged start is asked for: the server must still know it.
    // Otherwise only the runs this process did not see reach their end.
    if (obs.answered[i] == 1 && (!obs.completed[i] || s.restart_before_check))
      ask.push_back(run_id(i));
  }
  // A run that ended here before a kill -9 may replay its last steps (their records were not
  // durable yet), so a run still going gets until the deadline to end.
  std::string connect_err;
  // (Once the server's log failed no run can end: asked once, without waiting.)
  auto fates = ask_fates(server, s.security, ask,
                         clock_type::now() + std::chrono::seconds(log_failed().empty() ? 60 : 0),
                         &connect_err, [] { return interrupted() != 0; });
  if (!connect_err.empty()) unchecked_reason = connect_err;
  if (interrupted()) return cut_short();
  for (size_t k = 0; k < ask.size(); ++k) {
    auto& f = fates[k];
    if (f.status == "completed") continue;
    if (f.status == "running") {
      still_running++;
      if (running_ids.size() < 20) running_ids.push_back(ask[k]);
    } else if (f.status == "failed" || f.status == "cancelled") {
      failed++;
    } else if (f.status == "not_found") {
      lost++;  // acknowledged, and the server does not know it
      if (lost_ids.size() < 20) lost_ids.push_back(ask[k]);
    } else {
      unchecked++;
      if (unchecked_reason.empty()) unchecked_reason = f.detail;
    }
  }
  uint64_t sent = obs.sent;
  uint64_t duplicates = 0;
  std::string duplicate_example;
  {
    std::lock_guard<std::mutex> lk{obs.mtx};
    for (auto& [key, n] : obs.executions)
      if (n > 1) {
        duplicates++;
        if (duplicate_example.empty())
          duplicate_example = "step s" + std::to_string(key.second) + " of " + run_id(key.first) +
                              " ran " + std::to_string(n) + " times";
      }
  }
  if (s.workers > 0) {
    auto failed_log = log_failed();
    checks.push_back(
        {"the server's log never failed", failed_log.empty(),
         failed_log.empty() ? "no worker heard that it failed" : "a worker heard: " + failed_log});
  }
  checks.push_back(
      {"every start answered", unanswered == 0,
       std::to_string(unanswered) + " of " + std::to_string(sent) + " starts never answered"});
  checks.push_back(
      {"every started workflow accounted for", lost == 0 && unchecked == 0,
       std::to_string(lost) + " acknowledged starts unknown to the server" +
           (ask.empty() ? " (none was asked: every acknowledged run ended in this tool)" : "") +
           (lost_ids.empty() ? "" : " (" + join(lost_ids) + ")") +
           (unchecked == 0 ? ""
                           : ", " + std::to_string(unchecked) + " could not be asked for (" +
                                 unchecked_reason + ")")});
  checks.push_back({"every started workflow completed", still_running == 0 && failed == 0,
                    std::to_string(still_running) + " still running" +
                        (running_ids.empty() ? "" : " (" + join(running_ids) + ")") + ", " +
                        std::to_string(failed) + " failed"});
  uint64_t step_durable_count = 0, reran = obs.reran_after_durable;
  std::string rerun_example;
  {
    std::lock_guard<std::mutex> lk{obs.mtx};
    step_durable_count = obs.step_durable.count();
    rerun_example = obs.rerun_example;
  }
  checks.push_back({"no step ran again after it was durable", reran == 0,
                    std::to_string(reran) +
                        " step bodies ran again after their record was reported durable (" +
                        std::to_string(step_durable_count) + " steps reported durable; " +
                        std::to_string(obs.reran_by_deposed.load()) +
                        " more ran in holders that had lost their lease and did not know yet, "
                        "fenced)" +
                        (rerun_example.empty() ? "" : ", e.g. " + rerun_example)});
  // A crash (server or worker) loses the results not yet durable, and their steps run again:
  // at-least-once until durable, see docs/load-testing.md.
  bool crashes = s.server_kills > 0 || s.worker_kill_every_s > 0 || s.restart_before_check ||
                 (s.crash_rate > 0 && s.endpoints > 0);
  if (crashes)
    checks.push_back({"steps ran again only before they were durable", true,
                      std::to_string(duplicates) +
                          " steps ran more than once (allowed: a crash loses results not yet "
                          "durable)" +
                          (duplicates ? ", e.g. " + duplicate_example : "")});
  else
    checks.push_back({"no step body ran twice", duplicates == 0,
                      duplicates == 0
                          ? "0 steps ran twice"
                          : std::to_string(duplicates) + " steps ran more than once, e.g. " +
                                duplicate_example});
  if (s.signals) {
    uint64_t unanswered_signals = obs.signals_sent - obs.signals_ok - obs.signals_refused;
    checks.push_back({"every signal answered", unanswered_signals == 0 && obs.signals_refused == 0,
                      std::to_string(obs.signals_ok.load()) + " of " +
                          std::to_string(obs.signals_sent.load()) + " signals answered ok, " +
                          std::to_string(obs.signals_refused.load()) + " refused"});
  }
  checks.push_back({"errors within the target", obs.refused <= s.max_errors,
                    std::to_string(obs.refused.load()) + " refused starts (target " +
                        std::to_string(s.max_errors) + ")"});
  latency_histogram start_latency, complete_latency, step_durable, timer_lateness, signal_latency,
      wake_to_post, wake_server, wake_total;
  {
    std::lock_guard<std::mutex> lk{obs.mtx};
    start_latency = obs.start_latency;
    complete_latency = obs.complete_latency;
    step_durable = obs.step_durable;
    timer_lateness = obs.timer_lateness;
    signal_latency = obs.signal_latency;
    wake_to_post = obs.wake_to_post;
    wake_server = obs.wake_server;
    wake_total = obs.wake_total;
  }
  auto p99_target = [&](const char* name, const latency_histogram& h, double target) {
    if (target <= 0 || !options.performance_targets) return;
    double p99 = ms(h.percentile(0.99));
    checks.push_back({name, h.count() > 0 && p99 <= target,
                      h.count() == 0 ? "nothing was measured"
                                     : fixed(p99) + " ms (target " + fixed(target) + " ms)"});
  };
  p99_target("start p99 within the target", start_latency, s.max_start_p99_ms);
  p99_target("completion p99 within the target", complete_latency, s.max_complete_p99_ms);
  p99_target("timer lateness p99 within the target", timer_lateness, s.max_timer_lateness_p99_ms);
  p99_target("the server's share of a cold wake within the target (p99)", wake_server,
             s.max_wake_server_p99_ms);
  if (s.max_step_p99_over_p50 > 0 && options.performance_targets) {
    double p50 = ms(step_durable.percentile(0.5)), p99 = ms(step_durable.percentile(0.99));
    checks.push_back({"step durable p99 within the target times p50",
                      p50 > 0 && p99 <= s.max_step_p99_over_p50 * p50,
                      "p50 " + fixed(p50) + " ms, p99 " + fixed(p99) + " ms (" +
                          fixed(p50 > 0 ? p99 / p50 : 0, 1) + "x; target " +
                          fixed(s.max_step_p99_over_p50, 1) + "x)"});
  }
  if (s.min_wakes_per_s > 0 && options.performance_targets) {
    auto v = wakes_per_s;
    std::sort(v.begin(), v.end());
    double median = v.empty() ? 0 : v[v.size() / 2];
    checks.push_back({"invocations per second sustained", median >= s.min_wakes_per_s,
                      "median " + fixed(median, 0) + "/s over the schedule's seconds (target " +
                          fixed(s.min_wakes_per_s, 0) + "/s)"});
  }
  if (s.max_rss_growth > 0 && local && s.server_kills == 0 && options.performance_targets) {
    // Samples after warm-up stay within +-max_rss_growth of the first of them.
    double ref = 0, lo = 0, hi = 0;
    for (auto& p : timeline) {
      if (p["t_s"].get<double>() < s.warmup_s) continue;
      double v = p["server_rss_mb"].get<double>();
      if (ref == 0) ref = lo = hi = v;
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
    bool ok = ref > 0 && hi <= ref * (1 + s.max_rss_growth) && lo >= ref * (1 - s.max_rss_growth);
    checks.push_back({"server memory steady after warm-up", ok,
                      ref == 0 ? "no sample after warm-up"
                               : "RSS " + fixed(ref, 1) + " MB at " + fixed(s.warmup_s, 0) +
                                     " s, then " + fixed(lo, 1) + " to " + fixed(hi, 1) +
                                     " MB (target +-" + fixed(100 * s.max_rss_growth, 0) + " %)"});
  }

  // The invoker backs off failing endpoints: invocations stay bounded by the work (at most two
  // per acknowledged start, 10 per second of run for each endpoint's retries, and one per shard
  // for each server start, whose recovery makes every unheld shard due once), never a storm.
  uint64_t posts = 0, post_failed = 0, post_hung = 0, post_crashed = 0, post_ran = 0;
  for (auto& e : endpoints) {
    posts += e->posts;
    post_failed += e->failed;
    post_hung += e->hung;
    post_crashed += e->crashed;
    post_ran += e->ran;
  }
  if (!endpoints.empty()) {
    uint64_t server_starts = 1 + kills.load() + (s.restart_before_check ? 1 : 0);
    auto bound = 2 * obs.ok.load() + uint64_t(10 * wall) * endpoints.size() +
                 uint64_t{s.shards} * server_starts;
    checks.push_back({"the invoker did not storm", posts <= bound,
                      std::to_string(posts) + " invocations for " + std::to_string(obs.ok.load()) +
                          " starts (bound " + std::to_string(bound) + ")"});
  }

  auto metrics_after = scrape_metrics(admin);
  uint64_t fleet_kills = 0, fleet_losses = 0;
  stop_workers();
  for (auto& f : fleets) {
    fleet_kills += f->kills();
    fleet_losses += f->losses();
  }
  for (auto& e : endpoints)
    e->stop();

  // The summary and the report.
  double active = std::max(wall, 1e-9);
  json report{
      {"scenario", s.name},
      {"settings", to_toml(s)},
      {"server", server},
      {"started_here", local != nullptr},
      {"starts",
       {{"scheduled", starts},
        {"sent", sent},
        {"ok", obs.ok.load()},
        {"refused", obs.refused.load()},
        {"unanswered", unanswered},
        {"not_sent", unsent},
        {"resent_in_doubt", obs.starts_resent_in_doubt.load()},
        {"resent_parked_too_long", obs.starts_resent_parked.load()},
        {"client_reconnects", client_reconnects}}},
      {"workflows",
       {{"completed", obs.done.load()},
        {"still_running", still_running},
        {"failed", failed},
        {"lost", lost}}},
      {"signals",
       {{"sent", obs.signals_sent.load()},
        {"ok", obs.signals_ok.load()},
        {"refused", obs.signals_refused.load()},
        {"resent_in_doubt", obs.signals_resent_in_doubt.load()},
        {"resent_parked_too_long", obs.signals_resent_parked.load()},
        {"duplicates", obs.signals_duplicate.load()}}},
      {"step_bodies_run", obs.step_runs.load()},
      {"steps_durable", step_durable_count},
      {"steps_ran_again_after_durable", reran},
      {"steps_ran_again_by_deposed_holders", obs.reran_by_deposed.load()},
      {"steps_ran_more_than_once", duplicates},
      {"server_kills", kills.load()},
      {"server_kill_times_s", killed_at},
      {"workers",
       {{"count", s.workers},
        {"threads", fleets.size()},
        {"connect_s", connect_s},
        {"killed", fleet_kills},
        {"connections_lost", fleet_losses},
        {"kills_requested", worker_kills.load()}}},
      {"invocations",
       {{"posts", posts},
        {"failed", post_failed},
        {"hung", post_hung},
        {"crashed", post_crashed},
        {"ran", post_ran},
        {"startup_wave", startup_posts}}},
      {"throughput",
       {{"starts_per_s", double(obs.ok) / active},
        {"workflows_per_s", double(obs.done) / active},
        {"steps_per_s", double(obs.step_runs) / active},
        {"invocations_per_s", double(post_ran - startup_ran) / active}}},
      // start_answered: scheduled time (closed loop: send time) -> the start's reply, which
      // leaves once the start is durable (the call-answered latency). workflow_ran: scheduled
      // time -> the run's code reached its end. step_durable: a step body's return -> the
      // DURABLE covering its record. signal_answered: sent -> answered. timer_lateness: due ->
      // the code after the sleep runs. cold_wake_*: see docs/load-testing.md.
      {"latency",
       {{"start_answered", latency_json(start_latency)},
        {"workflow_ran", latency_json(complete_latency)},
        {"step_durable", latency_json(step_durable)},
        {"signal_answered", latency_json(signal_latency)},
        {"timer_lateness", latency_json(timer_lateness)},
        {"cold_wake_start_answered", latency_json(wake_total)},
        {"cold_wake_start_to_post", latency_json(wake_to_post)},
        {"cold_wake_server_share", latency_json(wake_server)}}},
      {"histogram_relative_error", start_latency.relative_error()},
      {"tool", {{"wall_s", wall}, {"cpu_s", cpu}, {"cpu_share_of_one_core", cpu / active}}},
      {"server_metrics", {{"start", metrics_before}, {"end", metrics_after}}},
      {"timeline", timeline},
      {"refusals", obs.refusals}};
  json jchecks = json::array();
  bool all_ok = true;
  for (auto& c : checks) {
    jchecks.push_back({{"name", c.name}, {"ok", c.ok}, {"detail", c.detail}});
    all_ok = all_ok && c.ok;
  }
  report["checks"] = jchecks;
  report["passed"] = all_ok;
  auto lat = [](const char* name, const latency_histogram& h) {
    return std::string(name) + " p50 " + fixed(ms(h.percentile(0.5))) + " / p99 " +
           fixed(ms(h.percentile(0.99))) + " / max " + fixed(ms(h.max())) + " ms";
  };
  say("fusee load: " + std::to_string(obs.ok.load()) + " started, " +
      std::to_string(obs.done.load()) + " completed in " + fixed(wall, 1) + " s (" +
      fixed(double(obs.done) / active, 0) + " workflows/s, " +
      fixed(double(obs.step_runs) / active, 0) + " steps/s); this tool used " + fixed(cpu) +
      " CPU s (" + fixed(100 * cpu / active, 0) + " % of a core)");
  say("  " + lat("start answered", start_latency));
  say("  " + lat("step durable", step_durable));
  say("  " + lat("workflow ran", complete_latency));
  if (signal_latency.count()) say("  " + lat("signal answered", signal_latency));
  if (timer_lateness.count()) say("  " + lat("timer lateness", timer_lateness));
  if (wake_server.count())
    say("  " + lat("cold wake, server's share", wake_server) + " (" +
        std::to_string(wake_server.count()) + " wakes)");
  if (!endpoints.empty())
    say("  invocations: " + std::to_string(posts) + " POSTs (" + std::to_string(startup_posts) +
        " of them the server's start-up wave): " + std::to_string(post_ran) + " ran, " +
        std::to_string(post_failed) + " failed, " + std::to_string(post_hung) + " hung, " +
        std::to_string(post_crashed) + " of the runs dropped their connection on purpose");
  if (auto resent = obs.starts_resent_in_doubt + obs.starts_resent_parked +
                    obs.signals_resent_in_doubt + obs.signals_resent_parked;
      resent > 0 || client_reconnects > 0)
    say("  clients sent again: " + std::to_string(obs.starts_resent_in_doubt.load()) +
        " starts and " + std::to_string(obs.signals_resent_in_doubt.load()) +
        " signals in doubt (holder lost), " + std::to_string(obs.starts_resent_parked.load()) +
        " starts and " + std::to_string(obs.signals_resent_parked.load()) +
        " signals not run (no holder in time, or its node down); " +
        std::to_string(client_reconnects) + " reconnects; of the resent signals, " +
        std::to_string(obs.signals_duplicate.load()) +
        " the run had taken already (answered as duplicates)");
  if (!down_at_end.empty())
    say("  the server could not be reached at the end by any client connection: " + down_at_end);
  if (fleet_kills || kills)
    say("  chaos: " + std::to_string(kills.load()) + " server kills, " +
        std::to_string(fleet_kills) + " worker kills");
  if (!obs.refusals.empty()) {  // so a FAIL of the errors' check says why without the report
    say("  refusals by reason:");
    for (auto& line : commonest_refusals(obs.refusals, 5))
      say("    " + line);
  }
  for (auto& c : checks)
    say(std::string(c.ok ? "  ok    " : "  FAIL  ") + c.name + ": " + c.detail);
  std::ofstream out(report_file);
  out << report.dump(2) << "\n";
  out.close();
  if (!out) {  // the run's results are printed above; the exit says the report is missing
    std::fprintf(stderr, "fusee load: cannot write the report to %s: %s\n", report_file.c_str(),
                 std::strerror(errno));
    return 1;
  }
  say("fusee load: report written to " + report_file);
  return all_ok ? 0 : 1;
}

}  // namespace fusee::load
