#include "app/server_main.hpp"

#include <csignal>
#include <cstdio>
#include <fstream>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/directory.hpp"
#include "actors/http_client.hpp"
#include "actors/invoker.hpp"
#include "actors/listener.hpp"
#include "actors/log_sink.hpp"
#include "actors/message_types.hpp"
#include "actors/wal/wal_writer.hpp"
#include "app/admin_routes.hpp"
#include "app/http_api.hpp"

namespace fusee::app {

namespace {

struct node_config : caf::actor_system_config {
  node_config() {
    server::add_server_types(*this);
    load<caf::io::middleman>();
    set("scheduler.max-threads", 2);
    // One shared job queue, not work stealing: CAF 0.17 steals with take_tail(), which walks the
    // victim's whole queue under its lock, so one actor waking 100,000 wake records (the
    // directory ending a worker's leases) cost O(n^2): 119 s for a 100,000-shard timer storm,
    // 2.9 s with sharing. Step latency and throughput showed no difference beyond this
    // machine's noise (docs/benchmarks.md).
    set("scheduler.policy", caf::atom("sharing"));
  }
};

}  // namespace

int run_server(const server_config& cfg, const std::string& ready_file) {
  auto listen = parse_host_port(cfg.listen);

  // Block the stop signals before any thread exists, so only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  server::log_sink sink;
  server::wal_recovery_report rep;
  auto opened = server::wal_writer::open(server::wal_options::of(cfg), &sink, &rep);
  if (!opened) {
    std::fprintf(stderr, "fusee server: %s\n", opened.err().message.c_str());
    return 1;
  }
  auto wal = std::move(*opened);
  std::fprintf(stderr,
               "fusee server: recovered %llu records in %llu batches from %llu segments of %s\n",
               (unsigned long long)rep.records, (unsigned long long)rep.batches,
               (unsigned long long)rep.segments, cfg.data_dir.c_str());
  if (rep.torn_bytes > 0)
    std::fprintf(stderr, "fusee server: dropped a torn tail of %llu bytes (%s)\n",
                 (unsigned long long)rep.torn_bytes, rep.torn_reason.c_str());

  int rc = 0;
  // The curl thread outlives the actor system: an endpoint actor still draining its mailbox
  // while the system shuts down may call submit() (a no-op once stopped), never a freed client.
  std::unique_ptr<server::http_client> http;
  {
    node_config caf_cfg;
    caf::actor_system sys{caf_cfg};
    auto directory = server::spawn_directory(sys, cfg, wal.get());
    sink.set_directory(directory);
    std::string lerr;
    auto acceptor = server::listener::start(
        sys, listen->host, listen->port,
        server::session_context{std::make_shared<const server::node_settings>(cfg), directory,
                                wal.get(), &sink},
        &lerr);
    if (!acceptor) {
      std::fprintf(stderr, "fusee server: %s\n", lerr.c_str());
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
      rc = 1;
    } else {
      uint16_t port = acceptor->port();
      std::fprintf(stderr, "fusee server: %u shards, workers and clients on %s:%u\n", cfg.shards,
                   listen->host.c_str(), port);
    }
    // The invoker, when endpoints are configured: a curl thread plus scheduler and endpoints.
    server::scheduler_actor scheduler;
    if (acceptor && !cfg.endpoints.empty()) {
      http = std::make_unique<server::http_client>();
      auto address = !cfg.advertise.empty() ? cfg.advertise
                                            : listen->host + ":" + std::to_string(acceptor->port());
      auto invoker = server::spawn_invoker(sys, cfg, address, http.get(), directory);
      scheduler = invoker.scheduler;
      caf::anon_send(directory, server::invoker_ready{scheduler, std::move(invoker.shards)});
      std::fprintf(stderr, "fusee server: invoker with %zu endpoint(s), server address %s\n",
                   cfg.endpoints.size(), address.c_str());
    }
    // A listener that cannot start stops the start: the worker listener closes, the node stops.
    auto refuse_start = [&](const char* setting, const std::string& why) {
      std::fprintf(stderr, "fusee server: `%s`: %s\n", setting, why.c_str());
      acceptor->stop();
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
      rc = 1;
      acceptor.reset();
    };
    // The admin HTTP server (admin_routes.cpp).
    std::unique_ptr<http_server> admin;
    auto admin_at = parse_host_port(cfg.admin_listen);
    if (acceptor) {
      std::string aerr;
      admin = http_server::start(admin_at->host, admin_at->port,
                                 admin_routes(sys, directory, scheduler), &aerr);
      if (!admin) {
        refuse_start("server.admin_listen", aerr);
      } else {
        std::fprintf(stderr, "fusee server: admin HTTP on %s:%u\n", admin_at->host.c_str(),
                     admin->port());
      }
    }
    // The HTTP API for clients.
    std::unique_ptr<http_api> api;
    if (acceptor && !cfg.http_listen.empty()) {
      auto at = parse_host_port(cfg.http_listen);
      std::string herr;
      api = http_api::start(sys, directory, cfg, at->host, at->port, &herr);
      if (!api) {
        refuse_start("server.http_listen", herr);
      } else {
        std::fprintf(stderr, "fusee server: HTTP API on %s:%u\n", at->host.c_str(), api->port());
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
          if (api)
            out << "http=" << parse_host_port(cfg.http_listen)->host << ":" << api->port() << "\n";
        }
        std::rename(tmp.c_str(), ready_file.c_str());
      }
      int sig = 0;
      sigwait(&stop_signals, &sig);
      std::fprintf(stderr, "fusee server: signal %d, stopping\n", sig);
      acceptor->stop();
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
    }
    api.reset();
    admin.reset();
    if (scheduler) caf::anon_send_exit(scheduler, caf::exit_reason::user_shutdown);
    if (http) http->stop();
    wal->stop();
    sink.set_directory(server::directory_actor{});
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
