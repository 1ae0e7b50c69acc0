#include "load/load_run.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include <curl/curl.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/address.hpp"
#include "client/connection.hpp"
#include "load/latency_histogram.hpp"
#include "load/sim_endpoint.hpp"
#include "protocol/shard_hash.hpp"
#include "worker/client.hpp"
#include "worker/runtime.hpp"

namespace fusee::load {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;
using worker::json;

// -- the server ---------------------------------------------------------------------------------

/// A `fusee server` this run started on a fresh data dir, on free loopback ports.
struct local_server {
  fs::path dir;
  pid_t pid = -1;
  std::string listen, admin;

  std::string binary_;
  uint32_t shards_ = 0;

  /// The last lines of the server's log (for a failure message).
  std::string log_tail() const {
    std::ifstream in(dir / "server.log");
    std::string all{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
  }

  /// The data dir's parent, for files the configuration names (made once).
  std::string prepare() {
    char tmpl[] = "/tmp/fusee-load-XXXXXX";
    if (!::mkdtemp(tmpl)) return "cannot make a temporary directory";
    dir = tmpl;
    return {};
  }

  /// Starts the server with `toml` as its configuration (after prepare()).
  std::string start(const std::string& binary, uint32_t shards, const std::string& toml) {
    binary_ = binary;
    shards_ = shards;
    std::ofstream(dir / "fusee.toml") << toml;
    return launch("127.0.0.1:0", "127.0.0.1:0");
  }

  /// kill -9, then the same data dir on the same ports (workers reconnect to the address).
  std::string restart() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      pid = -1;
    }
    return launch(listen, admin);
  }

  std::string launch(const std::string& listen_at, const std::string& admin_at) {
    auto ready = dir / "ready";
    fs::remove(ready);
    // Everything the child needs is built before fork(): other threads run (workers), so the
    // child may only call async-signal-safe functions until exec.
    std::vector<std::string> args{binary_,
                                  "server",
                                  "--config",
                                  (dir / "fusee.toml").string(),
                                  "--data-dir",
                                  (dir / "data").string(),
                                  "--shards",
                                  std::to_string(shards_),
                                  "--listen",
                                  listen_at,
                                  "--admin-listen",
                                  admin_at,
                                  "--http-listen",
                                  "off",
                                  "--inspect-listen",
                                  "off",
                                  "--ready-file",
                                  ready.string()};
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    int log = ::open((dir / "server.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0) return "cannot open " + (dir / "server.log").string();
    pid = ::fork();
    if (pid < 0) {
      ::close(log);
      return "fork failed";
    }
    if (pid == 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(log);
    auto deadline = clock_type::now() + std::chrono::seconds(30);
    while (clock_type::now() < deadline) {
      if (fs::exists(ready)) {
        std::ifstream in(ready);
        std::string line;
        while (std::getline(in, line)) {
          if (line.rfind("listen=", 0) == 0) listen = line.substr(7);
          if (line.rfind("admin=", 0) == 0) admin = line.substr(6);
        }
        return {};
      }
      int status = 0;
      if (::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        return "the server exited at start; its log is " + (dir / "server.log").string();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // awaiting a file
    }
    return "the server did not start within 30 s";
  }
  ~local_server() {
    if (pid > 0) {  // SIGTERM, then SIGKILL if it is not gone within 10 s
      ::kill(pid, SIGTERM);
      int status = 0;
      auto deadline = clock_type::now() + std::chrono::seconds(10);
      while (::waitpid(pid, &status, WNOHANG) != pid) {
        if (clock_type::now() > deadline) {
          ::kill(pid, SIGKILL);
          ::waitpid(pid, &status, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));  // awaiting an exit
      }
    }
    if (!dir.empty() && !std::getenv("FUSEE_LOAD_KEEP")) {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  }
};

size_t append_to_string(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}

/// GET http://admin/metrics; the samples by series (empty when it cannot be read).
std::map<std::string, double> scrape(const std::string& admin) {
  std::map<std::string, double> out;
  if (admin.empty()) return out;
  CURL* c = curl_easy_init();
  std::string body;
  auto url = "http://" + admin + "/metrics";
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append_to_string);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  bool ok = curl_easy_perform(c) == CURLE_OK;
  curl_easy_cleanup(c);
  if (!ok) return out;
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find("_bucket{") != std::string::npos) continue;
    auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

// -- what the run observes ----------------------------------------------------------------------

/// Shared by the workflow bodies (on the workers' threads), the clients and the reporter.
struct observations {
  explicit observations(size_t starts) : intended(starts), answered(starts), completed(starts) {}
  /// When the schedule starts, in ns of the steady clock (atomic: the workers' threads read it).
  std::atomic<int64_t> t0_ns{0};
  clock_type::time_point t0() const {
    return clock_type::time_point(std::chrono::nanoseconds(t0_ns.load()));
  }
  void set_t0(clock_type::time_point t) {
    t0_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
  }
  std::vector<std::atomic<int64_t>> intended;   ///< ns after t0 each start was scheduled for
  std::vector<std::atomic<uint8_t>> answered;   ///< 0 no answer, 1 ok, 2 refused
  std::vector<std::atomic<uint8_t>> completed;  ///< the run's code reached its end
  std::atomic<uint64_t> sent{0}, ok{0}, refused{0}, done{0}, step_runs{0};
  std::mutex mtx;  ///< guards what follows
  latency_histogram start_latency, complete_latency;
  latency_histogram interval_start_latency;                      ///< since the last timeline sample
  std::map<std::pair<uint64_t, uint32_t>, uint32_t> executions;  ///< (run, step) -> body runs
  std::map<std::string, uint64_t> refusals;                      ///< reason -> count

  int64_t since_t0(clock_type::time_point t) const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0()).count();
  }
};

/// Workflow ids: "load-<run>-<i>", <run> random per run, so runs against the same server never
/// meet each other's workflows.
std::string run_prefix() {
  static const std::string p = [] {
    std::random_device rd;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "load-%08x-", static_cast<unsigned>(rd()));
    return std::string(buf);
  }();
  return p;
}

std::string run_id(uint64_t i) {
  return run_prefix() + std::to_string(i);
}

/// The index of a run of this process, or nullopt (another run's workflow).
std::optional<uint64_t> index_of(const std::string& id) {
  auto p = run_prefix();
  if (id.compare(0, p.size(), p) != 0) return std::nullopt;
  return std::stoull(id.substr(p.size()));
}

void spin_for(std::chrono::microseconds d) {
  auto until = clock_type::now() + d;
  while (clock_type::now() < until) {
  }
}

/// The workflow every simulated start runs: `steps` steps (each a busy body of step_us that
/// counts its own executions), a durable sleep halfway when sleep_ms is set.
worker::registry workflows(observations* obs) {
  worker::registry r;
  r.add("load", [obs](worker::context& ctx, json input) -> worker::task<json> {
    uint64_t i = index_of(ctx.id()).value_or(UINT64_MAX);
    auto steps = input.value("steps", 3u);
    auto step_us = input.value("step_us", 0u);
    auto sleep_ms = input.value("sleep_ms", 0u);
    for (uint32_t k = 0; k < steps; ++k) {
      if (sleep_ms > 0 && k == steps / 2) co_await ctx.sleep(std::chrono::milliseconds(sleep_ms));
      auto name = "s" + std::to_string(k);
      co_await ctx.step(name, [obs, i, k, step_us] {
        spin_for(std::chrono::microseconds(step_us));
        obs->step_runs++;
        std::lock_guard<std::mutex> lk{obs->mtx};
        obs->executions[{i, k}]++;
        return k;
      });
    }
    if (i < obs->completed.size() && obs->completed[i].exchange(1) == 0) {
      obs->done++;
      auto late = obs->since_t0(clock_type::now()) - obs->intended[i].load();
      std::lock_guard<std::mutex> lk{obs->mtx};
      obs->complete_latency.record(static_cast<uint64_t>(std::max<int64_t>(late, 0)));
    }
    co_return json{{"steps", steps}};
  });
  return r;
}

// -- clients --------------------------------------------------------------------------------------

/// One client connection: a sender that sends each of its starts at its scheduled time, whatever
/// the answers do (open loop), and a receiver that matches the answers.
class client_lane {
public:
  client_lane(observations* obs, const scenario& s, uint32_t lane, uint64_t starts)
      : obs_(obs), s_(s), lane_(lane), starts_(starts), sent_(starts) {}

  /// Connects (CLIENT_HELLO); an error text on failure.
  std::string connect(const std::string& server, uint32_t* shards) {
    server_ = server;
    auto at = client::parse_host_port(server);
    if (!at) return "server address " + server + " is not host:port";
    auto c = client::connection::open(at->host, at->port);
    if (!c) return c.err().message;
    auto conn = std::make_shared<client::connection>(std::move(*c));
    conn->send(proto::client_hello{proto::request_head{1}, proto::protocol_version,
                                   "load-client-" + std::to_string(lane_)});
    auto r = conn->receive(std::chrono::seconds(10));
    if (!r) return "no answer to CLIENT_HELLO: " + r.err().message;
    auto* ok = std::get_if<proto::ok>(&*r);
    auto n = ok ? proto::client_hello_shard_count(*ok) : std::nullopt;
    if (!n)
      return "the server answered CLIENT_HELLO with " +
             proto::kind_name(static_cast<uint8_t>(proto::kind_of(*r)));
    *shards = *n;
    shards_ = *n;
    std::lock_guard<std::mutex> lk{mtx_};
    conn_ = std::move(conn);
    return {};
  }

  void start() {
    receiver_ = std::thread([this] { receive_loop(); });
    sender_ = std::thread([this] { send_loop(); });
  }
  void stop() {
    stop_ = true;
    {
      std::lock_guard<std::mutex> lk{mtx_};
      if (conn_ && conn_->fd() >= 0) ::shutdown(conn_->fd(), SHUT_RDWR);  // unblocks both
    }
    if (sender_.joinable()) sender_.join();
    if (receiver_.joinable()) receiver_.join();
  }
  uint64_t reconnects() const { return reconnects_; }

private:
  /// Sends start `i` (again, after a reconnect: starts are idempotent by id).
  bool send_start(uint64_t i) {
    json input{{"steps", s_.steps}, {"step_us", s_.step_us}, {"sleep_ms", s_.sleep_ms}};
    auto id = run_id(i);
    json args{{"id", id}, {"type", "load"}, {"input", input}};
    auto text = args.dump();
    std::lock_guard<std::mutex> lk{mtx_};  // one writer at a time, whole frames
    return conn_ &&
           conn_->send(proto::call{
               proto::request_head{i + 2, proto::shard_for(id, shards_), proto::epoch_t{0}},
               "start", "load", proto::bytes(text.begin(), text.end()), 0});
  }

  void send_loop() {
    for (uint64_t i = lane_; i < starts_ && !stop_; i += s_.connections) {
      auto at = std::chrono::nanoseconds(static_cast<int64_t>(double(i) * 1e9 / s_.rate));
      std::this_thread::sleep_until(obs_->t0() + at);  // pacing the schedule, not synchronising
      obs_->intended[i] = at.count();
      sent_[i] = 1;
      obs_->sent++;
      send_start(i);  // a failed send is resent after the reconnect, like an unanswered one
    }
  }

  /// The connection broke (a server kill): connect again until stopped, then resend every start
  /// of this lane that was sent and not answered.
  bool reconnect() {
    while (!stop_) {
      uint32_t shards = 0;
      if (connect(server_, &shards).empty()) {
        reconnects_++;
        for (uint64_t i = lane_; i < starts_; i += s_.connections)
          if (sent_[i] && obs_->answered[i] == 0) {
            resent_[i] = 1;
            send_start(i);
          }
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));  // retry pacing
    }
    return false;
  }

  void receive_loop() {
    resent_.assign(starts_, 0);
    while (!stop_) {
      std::shared_ptr<client::connection> conn;
      {
        std::lock_guard<std::mutex> lk{mtx_};
        conn = conn_;
      }
      auto r = conn->receive(std::chrono::milliseconds(100));
      if (!r) {
        if (conn->timed_out()) continue;
        if (stop_ || s_.server_kills == 0 || !reconnect()) return;
        continue;
      }
      if (auto* e = std::get_if<proto::err>(&*r); e && e->id >= 2 && e->id - 2 < starts_) {
        if (obs_->answered[e->id - 2] != 0) continue;
        obs_->answered[e->id - 2] = 2;  // refused at the protocol level (ERR)
        obs_->refused++;
        std::lock_guard<std::mutex> lk{obs_->mtx};
        obs_->refusals["ERR " + std::to_string(e->code) + ": " + e->message]++;
        continue;
      }
      auto* res = std::get_if<proto::call_result>(&*r);
      if (!res || res->id < 2 || res->id - 2 >= starts_) continue;
      uint64_t i = res->id - 2;
      if (obs_->answered[i] != 0) continue;  // a resent start's second answer
      auto late = obs_->since_t0(clock_type::now()) - obs_->intended[i].load();
      auto body = json::parse(res->body.begin(), res->body.end(), nullptr, false);
      // "existing" is expected for a resent start whose first send was taken before the kill.
      bool existing = body.is_object() && body.value("existing", false) && !resent_[i];
      if (res->status == static_cast<uint8_t>(proto::call_status::ok) && !existing) {
        obs_->answered[i] = 1;
        obs_->ok++;
        std::lock_guard<std::mutex> lk{obs_->mtx};
        obs_->start_latency.record(static_cast<uint64_t>(std::max<int64_t>(late, 0)));
        obs_->interval_start_latency.record(static_cast<uint64_t>(std::max<int64_t>(late, 0)));
      } else {
        obs_->answered[i] = 2;
        obs_->refused++;
        std::lock_guard<std::mutex> lk{obs_->mtx};
        obs_->refusals[existing ? std::string("the run existed already (another run's id?)")
                                : "status " + std::to_string(res->status) + ": " +
                                      std::string(res->body.begin(), res->body.end())]++;
      }
    }
  }

  observations* obs_;
  const scenario& s_;
  uint32_t lane_;
  uint64_t starts_;
  uint32_t shards_ = 1;
  std::string server_;
  std::mutex mtx_;  ///< guards conn_ (swapped on reconnect) and writes to it
  std::shared_ptr<client::connection> conn_;
  std::vector<std::atomic<uint8_t>> sent_;
  std::vector<uint8_t> resent_;  ///< receiver thread only
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> reconnects_{0};
  std::thread sender_, receiver_;
};

// -- reporting ------------------------------------------------------------------------------------

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         double(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

json latency_json(const latency_histogram& h) {
  auto ms = [](uint64_t ns) { return double(ns) / 1e6; };
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

}  // namespace

int run_load(const scenario& s, const run_options& options) {
  auto say = [](const std::string& line) {
    std::fputs((line + "\n").c_str(), stdout);
    std::fflush(stdout);
  };
  bool tty = ::isatty(STDOUT_FILENO) != 0;
  auto planned = std::llround(s.duration_s * s.rate);
  constexpr long long max_starts = 10'000'000;  // ~100 MB of bookkeeping
  if (planned < 1 || planned > max_starts) {
    std::fprintf(stderr,
                 "fusee load: duration_s x rate = %lld workflow starts; it must be 1 to %lld\n",
                 planned, max_starts);
    return 2;
  }
  auto starts = static_cast<uint64_t>(planned);
  if ((s.restart_before_check || s.server_kills > 0) && !s.server.empty()) {
    std::fprintf(stderr, "fusee load: run.restart_before_check and chaos.server_kills need a "
                         "server this tool starts (not --server / run.server)\n");
    return 2;
  }
  observations obs(starts);

  if (s.endpoints > 0 && !s.server.empty()) {
    std::fprintf(stderr, "fusee load: [endpoints] need a server this tool starts (its "
                         "configuration names them), not --server / run.server\n");
    return 2;
  }
  auto types = workflows(&obs);

  // The server, with the simulated endpoints in its configuration.
  std::unique_ptr<local_server> local;
  std::vector<std::unique_ptr<sim_endpoint>> endpoints;
  std::string server = s.server, admin;
  if (server.empty()) {
    local = std::make_unique<local_server>();
    if (auto err = local->prepare(); !err.empty()) {
      std::fprintf(stderr, "fusee load: %s\n", err.c_str());
      return 2;
    }
    std::string toml = "[server]\n";
    if (s.endpoints > 0) {
      std::random_device rd;
      endpoint_behaviour b;
      b.fail_rate = s.fail_rate;
      b.hang_rate = s.hang_rate;
      b.hang_ms = s.budget_ms + 1000 + 1000;  // past budget + grace: the server times it out
      b.secret = "load-" + std::to_string(rd()) + std::to_string(rd());
      std::ofstream(local->dir / "endpoint.secret") << b.secret << "\n";
      for (uint32_t e = 0; e < s.endpoints; ++e) {
        std::string err;
        auto ep = sim_endpoint::start(types, b, (uint64_t{rd()} << 32) | rd(), &err);
        if (!ep) {
          std::fprintf(stderr, "fusee load: a simulated endpoint did not start: %s\n", err.c_str());
          return 2;
        }
        toml += "\n[[endpoint]]\nurl = \"http://127.0.0.1:" + std::to_string(ep->port()) +
                "/invoke\"\nsecret_file = \"" + (local->dir / "endpoint.secret").string() +
                "\"\nconcurrency = " + std::to_string(s.endpoint_concurrency) +
                "\nbudget_ms = " + std::to_string(s.budget_ms) +
                "\nmax_shards = " + std::to_string(s.endpoint_max_shards) + "\ngrace_ms = 1000\n";
        endpoints.push_back(std::move(ep));
      }
    }
    if (auto err = local->start(options.fusee_binary, s.shards, toml); !err.empty()) {
      std::fprintf(stderr, "fusee load: %s\n", err.c_str());
      return 2;
    }
    server = local->listen;
    admin = local->admin;
  }
  auto metrics_before = scrape(admin);

  // The workers: the real runtime, long-lived, each on its own thread.
  std::vector<std::unique_ptr<worker::runtime>> workers;
  std::vector<std::thread> worker_threads;
  for (uint32_t w = 0; w < s.workers; ++w) {
    worker::worker_options wo;
    wo.server = server;
    wo.name = "load-worker-" + std::to_string(w);
    wo.max_shards = s.max_shards;
    wo.log = [](const std::string&) {};  // reconnects are part of chaos, not news
    workers.push_back(std::make_unique<worker::runtime>(types, wo));
    worker_threads.emplace_back([rt = workers.back().get()] { rt->run(); });
  }

  // The clients.
  std::vector<std::unique_ptr<client_lane>> lanes;
  uint32_t shards = 0;
  for (uint32_t c = 0; c < s.connections; ++c) {
    lanes.push_back(std::make_unique<client_lane>(&obs, s, c, starts));
    if (auto err = lanes.back()->connect(server, &shards); !err.empty()) {
      std::fprintf(stderr, "fusee load: client %u: %s\n", c, err.c_str());
      if (local) std::fprintf(stderr, "the server's log:\n%s\n", local->log_tail().c_str());
      for (auto& w : workers)
        w->stop();
      for (auto& t : worker_threads)
        t.join();
      return 2;
    }
  }
  char intro[512];
  std::snprintf(intro, sizeof(intro),
                "fusee load: scenario \"%s\": %llu workflows at %g/s over %g s, %u workers, %u "
                "client connections, server %s%s",
                s.name.c_str(), static_cast<unsigned long long>(starts), s.rate, s.duration_s,
                s.workers, s.connections, server.c_str(), local ? " (started here)" : "");
  say(intro);

  double cpu0 = cpu_seconds();
  obs.set_t0(clock_type::now() + std::chrono::milliseconds(100));
  auto t0 = obs.t0();
  for (auto& l : lanes)
    l->start();

  // Chaos: kill -9 and restart the server at evenly spaced times of the schedule; workers and
  // clients reconnect by themselves.
  std::atomic<uint32_t> kills{0};
  std::vector<std::string> kill_errors;
  std::thread chaos;
  if (s.server_kills > 0 && local)
    chaos = std::thread([&] {
      for (uint32_t k = 1; k <= s.server_kills; ++k) {
        auto at = t0 + std::chrono::nanoseconds(static_cast<int64_t>(
                           s.duration_s * 1e9 * double(k) / double(s.server_kills + 1)));
        std::this_thread::sleep_until(at);  // the kill's scheduled time
        if (auto err = local->restart(); !err.empty()) {
          kill_errors.push_back(err);
          return;
        }
        kills++;
      }
    });
  // Progress until every start is sent and answered and every run completed, or drain_s past
  // the schedule.
  auto schedule_end = t0 + std::chrono::nanoseconds(static_cast<int64_t>(s.duration_s * 1e9));
  auto give_up = schedule_end + std::chrono::nanoseconds(static_cast<int64_t>(s.drain_s * 1e9));
  uint64_t last_ok = 0, last_done = 0;
  auto last = clock_type::now();
  int tick = 0;
  json timeline = json::array();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // pacing the progress line
    auto now = clock_type::now();
    bool finished = obs.sent == starts && obs.ok + obs.refused == starts;
    for (uint64_t i = 0; finished && i < starts; ++i)
      finished = obs.answered[i] != 1 || obs.completed[i] != 0;
    if (finished || now > give_up) break;
    if (++tick % 4 != 0) continue;
    double dt = std::chrono::duration<double>(now - last).count();
    double elapsed = std::chrono::duration<double>(now - t0).count();
    char line[256];
    std::snprintf(
        line, sizeof(line),
        "%6.1f/%.0f s  started %llu (%.0f/s)  completed %llu (%.0f/s)  in flight %llu  "
        "errors %llu",
        elapsed, s.duration_s, (unsigned long long)obs.ok.load(), double(obs.ok - last_ok) / dt,
        (unsigned long long)obs.done.load(), double(obs.done - last_done) / dt,
        (unsigned long long)std::max<int64_t>(
            0, int64_t(obs.sent.load()) - int64_t(obs.done.load()) - int64_t(obs.refused.load())),
        (unsigned long long)obs.refused.load());
    {  // one timeline sample a second: rates and the start latency of that second
      std::lock_guard<std::mutex> lk{obs.mtx};
      auto& h = obs.interval_start_latency;
      timeline.push_back({{"t_s", elapsed},
                          {"starts_per_s", double(obs.ok - last_ok) / dt},
                          {"completed_per_s", double(obs.done - last_done) / dt},
                          {"errors", obs.refused.load()},
                          {"start_p50_ms", double(h.percentile(0.5)) / 1e6},
                          {"start_p99_ms", double(h.percentile(0.99)) / 1e6},
                          {"start_max_ms", double(h.max()) / 1e6}});
      h.clear();
    }
    last_ok = obs.ok;
    last_done = obs.done;
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

  if (chaos.joinable()) chaos.join();
  for (auto& l : lanes)
    l->stop();

  std::vector<check> checks;
  if (s.server_kills > 0)
    checks.push_back({"the server came back after every kill -9", kill_errors.empty(),
                      std::to_string(kills.load()) + " of " + std::to_string(s.server_kills) +
                          " kills and restarts" +
                          (kill_errors.empty() ? "" : ": " + kill_errors.front())});
  if (s.restart_before_check && local) {
    auto err = local->restart();
    checks.push_back({"the server restarts after kill -9", err.empty(),
                      err.empty() ? "restarted on the same data dir and ports" : err});
    if (err.empty())
      say("fusee load: killed the server (kill -9) and started it again on its data dir");
  }

  // Account for every start: completed here, or asked for its state now.
  uint64_t unanswered = 0, still_running = 0, lost = 0, failed = 0;
  std::vector<std::string> running_ids, lost_ids;
  auto wc = worker::workflow_client::connect(server, "load-checker");
  auto check_deadline = clock_type::now() + std::chrono::seconds(60);
  uint64_t unchecked = 0;
  std::string unchecked_reason = wc ? "" : "the checker could not connect: " + wc.err().message;
  for (uint64_t i = 0; i < starts; ++i) {
    if (obs.answered[i] == 0) {
      unanswered++;
      continue;
    }
    // After a restart every acknowledged start is asked for: the server must still know it.
    // Otherwise only the runs this process did not see reach their end.
    if (obs.answered[i] != 1 || (obs.completed[i] && !s.restart_before_check)) continue;
    if (!wc) {
      unchecked++;
      continue;
    }
    // Parked up to 15 s (after a restart the workers need a moment to hold the shards again),
    // and a run still going may finish within the checks' overall minute: a run that ended here
    // before a kill -9 may replay its last steps, whose records were not durable yet.
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(check_deadline - clock_type::now());
    auto wait_ms = static_cast<uint64_t>(std::clamp<int64_t>(left.count(), 0, 10000));
    auto r = wc->result(run_id(i), wait_ms, 15000);
    auto status = r && r->ok() ? r->body.value("status", "") : "";
    if (status == "completed") continue;
    if (status == "running") {
      still_running++;
      if (running_ids.size() < 20) running_ids.push_back(run_id(i));
    } else if (status == "failed") {
      failed++;
    } else if (r && r->code() == "not_found") {
      lost++;  // acknowledged, and the server does not know it
      if (lost_ids.size() < 20) lost_ids.push_back(run_id(i));
    } else {
      unchecked++;
      if (unchecked_reason.empty())
        unchecked_reason = r ? (r->ok() ? r->body.dump() : r->error()) : r.err().message;
    }
  }
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
  auto join = [](const std::vector<std::string>& v) {
    std::string out;
    for (auto& x : v)
      out += (out.empty() ? "" : ", ") + x;
    return out;
  };
  checks.push_back(
      {"every start answered", unanswered == 0,
       std::to_string(unanswered) + " of " + std::to_string(starts) + " starts never answered"});
  checks.push_back(
      {"every started workflow accounted for", lost == 0 && unchecked == 0,
       std::to_string(lost) + " acknowledged starts unknown to the server" +
           (lost_ids.empty() ? "" : " (" + join(lost_ids) + ")") +
           (unchecked == 0 ? ""
                           : ", " + std::to_string(unchecked) + " could not be asked for (" +
                                 unchecked_reason + ")")});
  checks.push_back({"every started workflow completed", still_running == 0 && failed == 0,
                    std::to_string(still_running) + " still running" +
                        (running_ids.empty() ? "" : " (" + join(running_ids) + ")") + ", " +
                        std::to_string(failed) + " failed"});
  if (s.server_kills > 0)  // see docs/load-testing.md: steps run ahead of durability
    checks.push_back({"steps ran again only after a server kill", true,
                      std::to_string(duplicates) +
                          " steps ran more than once (allowed: a kill -9 loses the results not "
                          "yet durable, and their steps run again)" +
                          (duplicates ? ", e.g. " + duplicate_example : "")});
  else
    checks.push_back({"no step body ran twice", duplicates == 0,
                      duplicates == 0
                          ? "0 steps ran twice"
                          : std::to_string(duplicates) + " steps ran more than once, e.g. " +
                                duplicate_example});
  checks.push_back({"errors within the target", obs.refused <= s.max_errors,
                    std::to_string(obs.refused.load()) + " refused starts (target " +
                        std::to_string(s.max_errors) + ")"});
  latency_histogram start_latency, complete_latency;
  {
    std::lock_guard<std::mutex> lk{obs.mtx};
    start_latency = obs.start_latency;
    complete_latency = obs.complete_latency;
  }
  if (s.max_start_p99_ms > 0 && options.latency_targets) {
    double p99 = double(start_latency.percentile(0.99)) / 1e6;
    checks.push_back(
        {"start p99 within the target", p99 <= s.max_start_p99_ms,
         std::to_string(p99) + " ms (target " + std::to_string(s.max_start_p99_ms) + " ms)"});
  }
  if (s.max_complete_p99_ms > 0 && options.latency_targets) {
    double p99 = double(complete_latency.percentile(0.99)) / 1e6;
    checks.push_back(
        {"completion p99 within the target", p99 <= s.max_complete_p99_ms,
         std::to_string(p99) + " ms (target " + std::to_string(s.max_complete_p99_ms) + " ms)"});
  }

  // The invoker backs off failing endpoints: invocations stay bounded by the work (at most two
  // per acknowledged start, 10 per second of run for each endpoint's retries, and one per shard
  // for each server start, whose recovery makes every unheld shard due once), never a storm.
  uint64_t posts = 0, post_failed = 0, post_hung = 0, post_ran = 0;
  for (auto& e : endpoints) {
    posts += e->posts;
    post_failed += e->failed;
    post_hung += e->hung;
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

  auto metrics_after = scrape(admin);
  for (auto& w : workers)
    w->stop();
  for (auto& t : worker_threads)
    t.join();
  for (auto& e : endpoints)
    e->stop();

  // The summary and the report.
  double active = std::max(wall, 1e-9);
  json report{{"scenario", s.name},
              {"settings", to_toml(s)},
              {"server", server},
              {"started_here", local != nullptr},
              {"starts",
               {{"scheduled", starts},
                {"sent", obs.sent.load()},
                {"ok", obs.ok.load()},
                {"refused", obs.refused.load()},
                {"unanswered", unanswered}}},
              {"workflows",
               {{"completed", obs.done.load()},
                {"still_running", still_running},
                {"failed", failed},
                {"lost", lost}}},
              {"step_bodies_run", obs.step_runs.load()},
              {"server_kills", kills.load()},
              {"invocations",
               {{"posts", posts}, {"failed", post_failed}, {"hung", post_hung}, {"ran", post_ran}}},
              {"throughput",
               {{"starts_per_s", double(obs.ok) / active},
                {"workflows_per_s", double(obs.done) / active},
                {"steps_per_s", double(obs.step_runs) / active}}},
              // start_answered: scheduled time -> the start's reply, which leaves once the
              // start is durable (the call-answered latency). workflow_ran: scheduled time ->
              // the run's code reached its end (its last records may still be in flight).
              {"latency",
               {{"start_answered", latency_json(start_latency)},
                {"workflow_ran", latency_json(complete_latency)}}},
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
  auto file = options.report_file.empty() ? "load-" + s.name + ".json" : options.report_file;
  {
    std::error_code ec;
    if (fs::path(file).has_parent_path()) fs::create_directories(fs::path(file).parent_path(), ec);
    std::ofstream out(file);
    out << report.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "fusee load: cannot write the report to %s\n", file.c_str());
      return 2;
    }
  }

  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "fusee load: %llu started, %llu completed in %.1f s (%.0f workflows/s, %.0f "
                "steps/s); start answered p50 %.2f / p99 %.2f / max %.2f ms; workflow ran p50 "
                "%.2f / p99 %.2f ms; this tool used %.2f CPU s (%.0f %% of a core)",
                (unsigned long long)obs.ok.load(), (unsigned long long)obs.done.load(), wall,
                double(obs.done) / active, double(obs.step_runs) / active,
                double(start_latency.percentile(0.5)) / 1e6,
                double(start_latency.percentile(0.99)) / 1e6, double(start_latency.max()) / 1e6,
                double(complete_latency.percentile(0.5)) / 1e6,
                double(complete_latency.percentile(0.99)) / 1e6, cpu, 100 * cpu / active);
  say(buf);
  for (auto& c : checks)
    say(std::string(c.ok ? "  ok    " : "  FAIL  ") + c.name + ": " + c.detail);
  say("fusee load: report written to " + file);
  return all_ok ? 0 : 1;
}

}  // namespace fusee::load
