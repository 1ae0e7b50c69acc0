#include "app/server_main.hpp"

#include <csignal>
#include <cstdio>
#include <fstream>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/atoms.hpp"
#include "actors/directory.hpp"
#include "actors/log_sink.hpp"
#include "actors/session.hpp"
#include "actors/wal_writer.hpp"
#include "app/http_server.hpp"

namespace fusee::app {

namespace {

struct node_config : caf::actor_system_config {
  node_config() {
    server::add_server_types(*this);
    load<caf::io::middleman>();
    set("scheduler.max-threads", 2);
    // Messages from the log's writer thread wake a sleeping worker faster (STACK.md §8).
    set("work-stealing.moderate-sleep-duration", caf::timespan{0});
  }
};

}  // namespace

int run_server(const server_config& cfg, const std::string& ready_file) {
  auto listen = parse_host_port(cfg.listen);
  if (!cfg.endpoints.empty()) {
    // Refuse rather than ignore: an operator who configured endpoints expects invocations.
    std::fprintf(stderr,
                 "fusee server: %zu [[endpoint]] table(s) configured, but this build has no "
                 "invoker yet (issue 4); remove them to run without one\n",
                 cfg.endpoints.size());
    return 2;
  }
  // Block the stop signals before any thread exists, so only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::log_sink sink;
  server::wal_options wopts;
  wopts.dir = cfg.data_dir;
  wopts.shards = cfg.shards;
  wopts.segment_bytes = cfg.segment_mb << 20;
  std::string err;
  server::wal_recovery_report rep;
  auto wal = server::wal_writer::open(wopts, &sink, &err, &rep);
  if (!wal) {
    std::fprintf(stderr, "fusee server: %s\n", err.c_str());
    return 1;
  }
  std::fprintf(stderr,
               "fusee server: recovered %llu records in %llu batches from %llu segments of %s\n",
               (unsigned long long)rep.records, (unsigned long long)rep.batches,
               (unsigned long long)rep.segments, cfg.data_dir.c_str());
  if (rep.torn_bytes > 0)
    std::fprintf(stderr, "fusee server: dropped a torn tail of %llu bytes (%s)\n",
                 (unsigned long long)rep.torn_bytes, rep.torn_reason.c_str());

  int rc = 0;
  {
    node_config caf_cfg;
    caf::actor_system sys{caf_cfg};
    auto directory = server::spawn_directory(
        sys,
        server::directory_config{cfg.shards, cfg.ping_interval_ms, cfg.timeout_ms, cfg.park_ms},
        wal.get());
    sink.set_directory(directory);
    std::string lerr;
    auto acceptor = server::listener::start(
        sys, listen->host, listen->port,
        server::session_config{cfg.shards, cfg.ping_interval_ms, cfg.timeout_ms}, directory,
        wal.get(), &sink, &lerr);
    if (!acceptor) {
      std::fprintf(stderr, "fusee server: %s\n", lerr.c_str());
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
      rc = 1;
    } else {
      uint16_t port = acceptor->port();
      std::fprintf(stderr, "fusee server: %u shards, workers and clients on %s:%u\n", cfg.shards,
                   listen->host.c_str(), port);
    }
    // The admin HTTP server: /healthz now; /v1/invoker arrives with the invoker.
    std::unique_ptr<http_server> admin;
    auto admin_at = parse_host_port(cfg.admin_listen);
    if (acceptor) {
      std::string aerr;
      admin = http_server::start(
          admin_at->host, admin_at->port,
          [](const http_exchange& ex) {
            if (ex.method == "GET" && ex.path == "/healthz")
              return http_reply{200, "application/json", R"({"status":"ok"})"};
            return http_reply{404, "application/json",
                              R"({"error":"no such admin endpoint: )" + ex.method + " " + ex.path +
                                  R"("})"};
          },
          &aerr);
      if (!admin) {
        std::fprintf(stderr, "fusee server: `server.admin_listen`: %s\n", aerr.c_str());
        acceptor->stop();
        caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
        rc = 1;
        acceptor.reset();
      } else {
        std::fprintf(stderr, "fusee server: admin HTTP on %s:%u\n", admin_at->host.c_str(),
                     admin->port());
      }
    }
    if (acceptor) {
      uint16_t port = acceptor->port();
      if (!ready_file.empty()) {
        auto tmp = ready_file + ".tmp";
        {
          std::ofstream out(tmp);
          out << "listen=" << listen->host << ":" << port << "\n";
          out << "admin=" << admin_at->host << ":" << admin->port() << "\n";
        }
        std::rename(tmp.c_str(), ready_file.c_str());
      }
      int sig = 0;
      sigwait(&stop_signals, &sig);
      std::fprintf(stderr, "fusee server: signal %d, stopping\n", sig);
      acceptor->stop();
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
    }
    wal->stop();
    sink.set_directory(caf::actor{});
    auto st = wal->get_stats();
    std::fprintf(stderr,
                 "fusee server: log stats: %llu records in %llu batches, %llu fsyncs, "
                 "%.1f records per batch, %llu segments retired\n",
                 (unsigned long long)st.records, (unsigned long long)st.batches,
                 (unsigned long long)st.fsyncs,
                 st.batches ? double(st.records) / double(st.batches) : 0.0,
                 (unsigned long long)st.retired_segments);
  }
  return rc;
}

}  // namespace fusee::app
