// The fusee command: `fusee server`, `worker`, `handler`, `start | signal | result | describe |
// cancel`, `call`, `inspect`, `load`, `disk-check`.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <new>
#include <system_error>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <curl/curl.h>

#include "app/call.hpp"
#include "app/config.hpp"
#include "app/disk_check.hpp"
#include "app/handler.hpp"
#include "app/inspect_command.hpp"
#include "app/server_main.hpp"
#include "app/workflow_commands.hpp"
#include "client/security.hpp"
#include "load/load_run.hpp"

namespace {

/// An exception no code caught, on any thread: named on stderr, not only by an abort. Out of
/// threads or memory (EAGAIN or ENOMEM from a thread's start, bad_alloc: a machine's limits, at
/// start say) ends the process with exit 1 at once: unwinding would wait for the actors it did
/// not stop. Anything else is a bug: abort, for its core.
[[noreturn]] void on_terminate() {
  try {
    if (auto e = std::current_exception()) std::rethrow_exception(e);
    std::fputs("fusee: terminated\n", stderr);
  } catch (const std::system_error& e) {
    auto c = e.code();
    if (c == std::errc::resource_unavailable_try_again || c == std::errc::not_enough_memory) {
      std::fprintf(stderr, "fusee: cannot go on: %s (out of threads or memory?)\n", e.what());
      std::_Exit(1);
    }
    std::fprintf(stderr, "fusee: uncaught exception: %s\n", e.what());
  } catch (const std::bad_alloc& e) {
    std::fprintf(stderr, "fusee: cannot go on: %s (out of memory)\n", e.what());
    std::_Exit(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fusee: uncaught exception: %s\n", e.what());
  } catch (...) {
    std::fputs("fusee: uncaught exception\n", stderr);
  }
  std::abort();
}

}  // namespace

int main(int argc, char** argv) {
  std::set_terminate(on_terminate);
  // A peer that resets a TLS connection makes OpenSSL's next write() raise SIGPIPE (its socket
  // BIO does not pass MSG_NOSIGNAL): the write must fail with EPIPE instead, here and in every
  // command (workers, handlers, the load tool use TLS clients too).
  std::signal(SIGPIPE, SIG_IGN);
  // libcurl's global state must be set up before any thread exists (STACK.md §7.16).
  curl_global_init(CURL_GLOBAL_DEFAULT);
  CLI::App app{"Fusee: a durable workflow server. The server holds the log; workflow code runs "
               "in the application."};
  app.set_version_flag("--version", "fusee " FUSEE_VERSION);
  app.require_subcommand(1);

  fusee::app::server_config cfg;
  std::string config_file, ready_file;
  std::string data_dir, listen, admin_listen, http_listen, inspect_listen, log_level;
  uint32_t shards = 0;
  auto* server = app.add_subcommand("server", "run a server node");
  server->add_option("--config", config_file, "TOML configuration file")->check(CLI::ExistingFile);
  server->add_option("--data-dir", data_dir, "overrides [server] data_dir");
  server->add_option("--shards", shards, "overrides [server] shards");
  server->add_option("--listen", listen, "overrides [server] listen (host:port)");
  server->add_option("--admin-listen", admin_listen, "overrides [server] admin_listen");
  server->add_option("--http-listen", http_listen,
                     "overrides [server] http_listen (off: no HTTP API)");
  server->add_option("--inspect-listen", inspect_listen,
                     "overrides [server] inspect_listen (off: no `fusee inspect`)");
  server->add_option("--log-level", log_level,
                     "overrides [log] level: trace, debug, info, warn, error, off");
  server->add_option("--ready-file", ready_file,
                     "write listen=host:port here once serving (for scripts and tests)");
  bool list_settings = false;
  server->add_flag("--settings", list_settings, "list every setting with its default and exit");

  std::string check_dir = "./data";
  int check_runs = 1000;
  auto* check = app.add_subcommand("disk-check", "measure the fdatasync latency floor of a disk");
  check->add_option("--data-dir", check_dir, "directory on the disk to measure");
  check->add_option("--runs", check_runs, "number of write+fdatasync runs")
      ->check(CLI::Range(10, 1000000));
  int check_idle_ms = 20;
  check
      ->add_option("--idle-ms", check_idle_ms,
                   "idle time before each run of the idle case (at most 100 runs)")
      ->check(CLI::Range(0, 10000));

  // How a command checks the server and proves itself (docs/operations.md, "Securing a node").
  fusee::client::security_flags sec_flags;
  auto token_option = [&](CLI::App* c) {
    c->add_option("--token-file", sec_flags.token_file,
                  "file holding the token to prove to the server (default: $FUSEE_TOKEN_FILE; "
                  "none: the server needs no token)");
    c->add_option("--ca-file", sec_flags.ca_file,
                  "connect with TLS 1.3, checking the server's certificate against this CA "
                  "(default: $FUSEE_TLS_CA_FILE)");
    c->add_option("--cert-file", sec_flags.cert_file,
                  "client certificate for mutual TLS (default: $FUSEE_TLS_CERT_FILE)");
    c->add_option("--key-file", sec_flags.key_file, "its key (default: $FUSEE_TLS_KEY_FILE)");
    c->add_option("--server-name", sec_flags.server_name,
                  "the name the server's certificate must carry (default: the host dialled; "
                  "$FUSEE_TLS_SERVER_NAME)");
  };

  // Where a worker or client command dials: the flag, else $FUSEE_SERVER, else the default.
  auto server_option = [](CLI::App* c, std::string& server) {
    c->add_option("--server", server, "host:port of the server (default " + server + ")")
        ->envname("FUSEE_SERVER");
  };

  // The worker library's window of APPENDs (worker_options::max_appends_in_flight).
  auto add_window_option = [](CLI::App* c, uint32_t& window) {
    c->add_option("--max-appends-in-flight", window,
                  "APPENDs not yet durable at once; below the server's "
                  "limits.max_appends_in_flight")
        ->check(CLI::Range(uint32_t{1}, UINT32_MAX));
  };

  fusee::app::handler_config hcfg;
  auto* handler = app.add_subcommand(
      "handler", "an HTTP endpoint that runs invocations (the demo workflows, or a test mode)");
  handler
      ->add_option("--mode", hcfg.mode,
                   "workflows: run the demo workflows; echo: answer every call with a fixed "
                   "JSON (tests, benchmarks)")
      ->check(CLI::IsMember({"workflows", "echo"}));
  handler->add_option("--listen", hcfg.listen, "host:port to serve POSTs on (port 0: any)");
  handler
      ->add_option("--secret-file", hcfg.secret_files,
                   "a file holding the endpoint's HMAC secret; repeat it while rotating (the "
                   "current and the previous secret: a signature by either is accepted)")
      ->required();
  handler->add_option("--ready-file", hcfg.ready_file, "write listen=host:port here once serving");
  handler->add_option("--linger-ms", hcfg.linger_ms, "leave after this long without a call");
  add_window_option(handler, hcfg.max_appends_in_flight);
  handler
      ->add_option("--max-connections", hcfg.max_connections,
                   "connections served at once, a thread each; more are closed as they come")
      ->check(CLI::Range(1, 1000000));
  handler->add_option("--fail-status", hcfg.fail_status, "answer every POST with this status");
  handler->add_option("--due-in-ms", hcfg.due_in_ms, "report a timer this far ahead in IDLE");
  handler->add_option("--report-flags", hcfg.report_flags, "IDLE flags: 1 BUSY, 2 EXPIRED")
      ->check(CLI::Range(0, 3));

  std::string call_server = "127.0.0.1:7400", call_method, call_args = "{}", call_type,
              call_workflow;
  int64_t call_shard = -1;
  uint32_t call_park_ms = 0;
  auto* call = app.add_subcommand("call", "send one call to a shard's holder and print the answer");
  server_option(call, call_server);
  call->add_option("--shard", call_shard, "the shard to call")
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
  call->add_option("--workflow", call_workflow,
                   "a workflow id; its shard is fnv1a64(id) mod shards");
  call->add_option("--method", call_method, "the method to call")->required();
  call->add_option("--args", call_args, "JSON arguments");
  call->add_option("--type", call_type,
                   "workflow type (routes a start to an endpoint with its code)");
  call->add_option("--park-ms", call_park_ms,
                   "longest to wait for a holder (0: the server's limit)");

  fusee::app::worker_command wcfg;
  auto* worker = app.add_subcommand("worker", "a long-lived worker running the demo workflows");
  server_option(worker, wcfg.server);
  worker->add_option("--name", wcfg.name, "this worker's name (in the server's logs)");
  worker->add_option("--max-shards", wcfg.max_shards, "hold at most this many shards (0: all)");
  add_window_option(worker, wcfg.max_appends_in_flight);
  worker
      ->add_option("--checkpoint-every", wcfg.checkpoint_every,
                   "write a shard's checkpoint after this many records")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  worker->add_option("--checkpoint-after-ms", wcfg.checkpoint_after_ms,
                     "...or once its oldest record outside a checkpoint is this old (0: never)");
  worker->add_option("--retention-ms", wcfg.retention_ms,
                     "forget finished runs this long after they ended (0: never)");
  worker
      ->add_option("--resend-every-ms", wcfg.resend_every_ms,
                   "send a message between workflows again this long after it went unacknowledged")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));

  fusee::app::client_command ccfg;
  auto client_options = [&](CLI::App* c) {
    server_option(c, ccfg.server);
    c->add_option("--park-ms", ccfg.park_ms,
                  "longest to wait for a worker to hold the shard (0: the server's limit)");
  };
  auto* start = app.add_subcommand("start", "start a workflow (an existing id returns its run)");
  start->add_option("type", ccfg.type, "workflow type")->required();
  start->add_option("id", ccfg.id, "workflow id (the idempotency key)")->required();
  start->add_option("input", ccfg.json_arg, "input JSON (default null)");
  auto* signal = app.add_subcommand("signal", "send a signal to a workflow");
  signal->add_option("id", ccfg.id, "workflow id")->required();
  signal->add_option("name", ccfg.name, "signal name")->required();
  signal->add_option("payload", ccfg.json_arg, "payload JSON (default null)");
  signal
      ->add_option("--key", ccfg.key,
                   "idempotency key: a retry with the same key delivers nothing again "
                   "(answered \"duplicate\": true)")
      ->check([](const std::string& v) { return v.empty() ? "the key must not be empty" : ""; });
  auto* result = app.add_subcommand("result", "a workflow's status and result");
  result->add_option("id", ccfg.id, "workflow id")->required();
  result->add_option("--wait-ms", ccfg.wait_ms, "wait this long for the workflow to end");
  auto* describe = app.add_subcommand(
      "describe", "a workflow's status, current operation, timers, pending signals and steps");
  describe->add_option("id", ccfg.id, "workflow id")->required();
  auto* cancel = app.add_subcommand("cancel", "cancel a running workflow");
  cancel->add_option("id", ccfg.id, "workflow id")->required();
  for (auto* c : {start, signal, result, describe, cancel, worker, call, handler})
    token_option(c);
  for (auto* c : {start, signal, result, describe, cancel})
    client_options(c);

  fusee::app::inspect_command icmd;
  auto* inspect = app.add_subcommand(
      "inspect", "show a node's actors: shards, endpoints, sessions, the log, the invoker");
  inspect->add_option("--node", icmd.node,
                      "the node's inspect_listen address (host:port; default " + icmd.node + ")");
  inspect->add_flag("--json", icmd.json, "print the inspector's answer as JSON");
  inspect->add_flag("--watch", icmd.watch, "refresh every --interval-ms until Ctrl-C");
  inspect->add_flag("--cluster", icmd.cluster,
                    "every node of the cluster, through this node (without filters: each node's "
                    "actors but its shards)");
  inspect->add_option("--interval-ms", icmd.interval_ms, "refresh interval of --watch")
      ->check(CLI::Range(100, 3600000));
  std::map<std::string, std::string> inspect_args;
  for (auto [flag, key, what] :
       {std::tuple{"--kind", "kind",
                   "directory, scheduler, log, gateway, endpoint, session, shard, cluster"},
        std::tuple{"--shard", "shard", "a shard or a range such as 10-19"},
        std::tuple{"--state", "state", "only actors in this state (e.g. held, backoff, due)"},
        std::tuple{"--top", "top", "rank by: mailbox"},
        std::tuple{"--limit", "limit", "rows to show (default 100)"},
        std::tuple{"--offset", "offset", "rows to skip (paging)"},
        std::tuple{"--deadline-ms", "deadline_ms", "how long actors may take to answer"},
        std::tuple{"--every", "every", "1: ask every selected shard, not only the page's"},
        std::tuple{"--sample", "sample", "with --every 1: ask this many shards, spread out"},
        std::tuple{"--grid", "grid", "1: add one character per shard (H I B D W .)"}})
    inspect->add_option_function<std::string>(
        flag,
        [&inspect_args, key = std::string(key)](const std::string& v) { inspect_args[key] = v; },
        what);

  std::string load_file, load_server, load_report;
  double load_duration = 0, load_rate = 0;
  auto* load = app.add_subcommand(
      "load", "load-test a server with simulated workers and clients (bench/scenarios/*.toml)");
  load->add_option("--scenario", load_file, "scenario file (TOML)")
      ->required()
      ->check(CLI::ExistingFile);
  load->add_option("--server", load_server,
                   "host:port of a running server, or a cluster's nodes a,b,c (default: the "
                   "scenario's, else one started here)");
  load->add_option("--duration-s", load_duration, "overrides [run] duration_s")
      ->check(CLI::Range(0.1, 86400.0));
  load->add_option("--rate", load_rate, "overrides [clients] rate (starts per second)")
      ->check(CLI::Range(0.1, 1e7));
  token_option(load);
  load->add_option("--report", load_report, "the JSON report (default load-<name>.json)");
  std::vector<std::string> load_sets;
  load->add_option("--set", load_sets,
                   "overrides any scenario key, table.key=value (repeatable), e.g. "
                   "--set workflow.wake_at_s=5");
  bool load_correctness_only = false;
  load->add_flag("--correctness-only", load_correctness_only,
                 "check correctness only, not the scenario's performance targets (short CI runs)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; a usage error (unknown option, missing value) exits 2, as
    // every other refused input does, not with CLI11's own codes (105-115).
    return app.exit(e) == 0 ? 0 : 2;
  }

  fusee::client::security sec;
  for (auto* c : {start, signal, result, describe, cancel, worker, call, handler, load})
    if (*c) {
      auto s = fusee::client::resolve(sec_flags);
      if (!s) {
        std::fprintf(stderr, "fusee %s: %s\n", c->get_name().c_str(), s.err().message.c_str());
        return 2;
      }
      for (auto& w : s->warnings)
        std::fprintf(stderr, "fusee %s: warning: %s\n", c->get_name().c_str(), w.c_str());
      sec = std::move(*s);
    }

  if (*load) {
    std::string err;
    auto sc = fusee::load::load_scenario(load_file, &err);
    if (!sc) {
      std::fprintf(stderr, "fusee load: %s\n", err.c_str());
      return 2;
    }
    if (!load_server.empty()) sc->server = load_server;
    if (load_duration > 0) sc->duration_s = load_duration;
    if (load_rate > 0) sc->rate = load_rate;
    for (auto& set : load_sets)
      if (auto bad = fusee::load::apply_setting(*sc, set); !bad.empty()) {
        std::fprintf(stderr, "fusee load: %s\n", bad.c_str());
        return 2;
      }
    char self[4096];
    auto n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    std::string binary = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
    sc->security = sec;
    return fusee::load::run_load(*sc, {binary, load_report, !load_correctness_only});
  }

  if (*inspect) {
    icmd.query = inspect_args;
    return fusee::app::run_inspect(icmd);
  }

  for (auto* c : {start, signal, result, describe, cancel})
    if (*c) {
      ccfg.method = c->get_name();
      ccfg.security = sec;
      return fusee::app::run_client_command(ccfg);
    }
  if (*worker) {
    wcfg.security = sec;
    return fusee::app::run_worker(wcfg);
  }

  if (*call)
    return fusee::app::run_call(call_server, call_shard, call_workflow, call_method, call_args,
                                call_type, call_park_ms, sec);

  if (*handler) {
    hcfg.security = sec;
    return fusee::app::run_handler(hcfg);
  }

  if (*check) return fusee::app::run_disk_check(check_dir, check_runs, check_idle_ms);

  if (list_settings) {
    std::fputs(fusee::app::describe_settings().c_str(), stdout);
    return 0;
  }
  fusee::app::setting_origins origins;
  if (!config_file.empty())
    if (auto err = fusee::app::load_toml(config_file, cfg, &origins)) {
      std::fprintf(stderr, "fusee server: %s\n", err->c_str());
      return 2;
    }
  // A flag overrides the file; an error about its setting names the flag.
  auto set = [&](auto& field, auto value, const char* key, const char* name) {
    field = std::move(value);
    origins[key] = name;
  };
  if (!data_dir.empty()) set(cfg.data_dir, data_dir, "server.data_dir", "--data-dir");
  if (shards != 0 || server->count("--shards"))
    set(cfg.shards, shards, "server.shards", "--shards");
  if (server->count("--listen")) set(cfg.listen, listen, "server.listen", "--listen");
  if (server->count("--admin-listen"))  // ("" is refused: the admin server cannot be off)
    set(cfg.admin_listen, admin_listen, "server.admin_listen", "--admin-listen");
  if (server->count("--http-listen"))
    set(cfg.http_listen, http_listen == "off" ? "" : http_listen, "server.http_listen",
        "--http-listen");
  if (server->count("--inspect-listen"))
    set(cfg.inspect_listen, inspect_listen == "off" ? "" : inspect_listen, "server.inspect_listen",
        "--inspect-listen");
  if (!log_level.empty()) set(cfg.log_level, log_level, "log.level", "--log-level");
  if (auto err = fusee::app::validate(cfg, origins)) {
    std::fprintf(stderr, "fusee server: %s\n", err->c_str());
    return 2;
  }
  return fusee::app::run_server(cfg, ready_file);
}
