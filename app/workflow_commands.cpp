#include "app/workflow_commands.hpp"

#include <csignal>
#include <cstdio>
#include <thread>

#include "app/demo_workflows.hpp"
#include "worker/client.hpp"
#include "worker/runtime.hpp"

namespace fusee::app {

int run_worker(const worker_command& cfg) {
  worker::registry types;
  add_demo_workflows(types);
  worker::worker_options opts;
  opts.server = cfg.server;
  opts.name = cfg.name;
  opts.max_shards = cfg.max_shards;
  opts.max_appends_in_flight = cfg.max_appends_in_flight;
  opts.runner.checkpoint_every = cfg.checkpoint_every;
  opts.runner.checkpoint_after_ms = cfg.checkpoint_after_ms;
  opts.runner.retention_ms = cfg.retention_ms;
  opts.runner.resend_every_ms = cfg.resend_every_ms;
  opts.security = cfg.security;
  worker::runtime rt(types, opts);

  // SIGINT/SIGTERM stop the worker gracefully (DRAIN, answer routed calls, checkpoint).
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGUSR2);  // sent by this function when the runtime ends on its own
  sigaddset(&stop, SIGHUP);   // a reload, as the server's: it stops nothing
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread waiter([&] {
    int sig = 0;
    while (sigwait(&stop, &sig) == 0 && sig == SIGHUP)
      std::fprintf(stderr,
                   "%s: SIGHUP: the token file is read again at each connection; nothing else "
                   "to reload\n",
                   cfg.name.c_str());
    if (sig != SIGUSR2) std::fprintf(stderr, "%s: signal %d, stopping\n", cfg.name.c_str(), sig);
    rt.stop();
  });
  std::fprintf(stderr, "%s: workflows %s; serving %s\n", cfg.name.c_str(), types.list().c_str(),
               cfg.server.c_str());
  int rc = rt.run();
  if (rc != 0) rt.stop();
  pthread_kill(waiter.native_handle(), SIGUSR2);
  waiter.join();
  return rc;
}

int run_client_command(const client_command& cmd) {
  const char* tool = "fusee";
  worker::json arg = worker::json::parse(cmd.json_arg, nullptr, false);
  if (arg.is_discarded()) {
    std::fprintf(stderr, "%s %s: not JSON: %s\n", tool, cmd.method.c_str(), cmd.json_arg.c_str());
    return 2;
  }
  // Exit 1 for a refusal (the workflow's, or of the token or certificate: retrying will not
  // change it), 2 for no answer (a retry may get one).
  auto exit_of = [](const proto::error& e) {
    return e.code == proto::err_code::unauthorized ? 1 : 2;
  };
  auto c = worker::workflow_client::connect(cmd.server, "fusee-" + cmd.method, cmd.security);
  if (!c) {
    std::fprintf(stderr, "%s %s: %s\n", tool, cmd.method.c_str(), c.err().message.c_str());
    return exit_of(c.err());
  }
  proto::result<worker::call_answer> r = proto::error{proto::err_code::bad_body, "no method"};
  if (cmd.method == "start")
    r = c->start(cmd.type, cmd.id, arg, cmd.park_ms);
  else if (cmd.method == "signal")
    r = c->signal(cmd.id, cmd.name, arg, cmd.park_ms, cmd.key);
  else if (cmd.method == "result")
    r = c->result(cmd.id, cmd.wait_ms, cmd.park_ms);
  else if (cmd.method == "describe")
    r = c->describe(cmd.id, cmd.park_ms);
  else if (cmd.method == "cancel")
    r = c->cancel(cmd.id, cmd.park_ms);
  if (!r) {
    std::fprintf(stderr, "%s %s: %s\n", tool, cmd.method.c_str(), r.err().message.c_str());
    return exit_of(r.err());
  }
  // The server's own errors (no holder, holder lost, bad request) get the code the HTTP API
  // gives them; a worker's carry their own.
  if (!r->ok() && r->body.is_object() && r->body.contains("error") && !r->body.contains("code"))
    if (auto code = r->code(); !code.empty()) r->body["code"] = code;
  std::printf("%s\n", r->body.dump().c_str());
  if (r->ok()) return 0;
  if (r->status == proto::call_status::failed) return 1;
  std::fprintf(stderr, "%s %s: %s\n", tool, cmd.method.c_str(), r->error().c_str());
  return 2;
}

}  // namespace fusee::app
