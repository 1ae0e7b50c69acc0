#include "app/handler.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>

#include "app/config.hpp"
#include "app/demo_workflows.hpp"
#include "app/http_server.hpp"
#include "app/ready_file.hpp"
#include "client/connection.hpp"
#include "client/secret_file.hpp"
#include "logging/warning_limiter.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/json_text.hpp"
#include "protocol/signature.hpp"
#include "protocol/unix_time.hpp"
#include "worker/runtime.hpp"

namespace fusee::app {

namespace {

using namespace std::chrono_literals;

http_reply json_reply(unsigned status, const std::string& body) {
  return http_reply{status, "application/json", body};
}

using proto::json_error;

/// Runs one invocation as its worker: lease, answer relayed calls until quiet, DRAIN, IDLE.
/// `received` is when the whole POST had arrived; each call's answer says how long this handler
/// itself spent on it (`handler_us`: since the POST, less the wait for the server's LEASE, so the
/// signature check, the connect back and the wait from the LEASE to the call count as the
/// handler's) and how long the call came after the LEASE (`since_lease_us`), so a benchmark can
/// separate the server's share of a cold wake from the handler's.
http_reply run_invocation(const handler_config& cfg, const proto::invocation_request& req,
                          std::chrono::steady_clock::time_point received) {
  auto at = parse_host_port(req.server);
  if (!at) return json_reply(400, json_error("bad server address " + req.server));
  auto c = client::connection::open(at->host, at->port, cfg.security, 5s);
  auto unavailable = [&](const std::string& why) {
    std::fprintf(stderr, "fusee handler: invocation %s: %s\n",
                 proto::format_invocation_id(req.invocation).c_str(), why.c_str());
    return json_reply(503, json_error(why));
  };
  if (!c) return unavailable("the server could not be reached: " + c.err().message);
  auto asked = std::chrono::steady_clock::now();
  auto lease = client::hello(*c, proto::offer_invoked | proto::offer_serve_calls, 0,
                             "fusee-handler", 5s, req.invocation);
  auto leased = std::chrono::steady_clock::now();
  auto lease_wait = leased - asked;
  if (!lease) return unavailable("no lease: " + lease.err().to_string());
  std::map<uint32_t, proto::grant_entry> held;
  for (auto& g : lease->grants)
    held[g.shard.value()] = g;
  std::map<uint32_t, uint64_t> steps;
  uint64_t calls = 0;
  auto answer = [&](const proto::relayed_call& rc) {
    auto g = held.find(rc.shard.value());
    if (g == held.end()) return;
    auto now = std::chrono::steady_clock::now();
    auto us = [](auto d) {
      return std::to_string(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
    };
    std::string body = "{\"handled\":" + proto::json_quote(rc.method) +
                       ",\"shard\":" + std::to_string(rc.shard.value()) +
                       ",\"handler_us\":" + us(now - received - lease_wait) +
                       ",\"lease_us\":" + us(lease_wait) +
                       ",\"since_lease_us\":" + us(now - leased) +
                       ",\"post_at_us\":" + us(received.time_since_epoch()) + "}";
    c->send(proto::call_reply{proto::request_head{0, g->second.shard, g->second.epoch}, rc.relay, 1,
                              proto::bytes(body.begin(), body.end())});
    ++calls;
    ++steps[rc.shard.value()];
  };
  // Serve until nothing arrives for linger_ms (or the budget is nearly over).
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(lease->remaining_ms);
  for (;;) {
    auto r = c->receive(std::chrono::milliseconds(cfg.linger_ms));
    if (!r) break;  // quiet (or closed)
    if (auto* rc = std::get_if<proto::relayed_call>(&*r)) answer(*rc);
    if (std::chrono::steady_clock::now() + 200ms > deadline) break;
  }
  uint64_t next_id = 10;
  auto wait_ok = [&](uint64_t id) {
    for (;;) {
      auto r = c->receive(5s);
      if (!r) return false;
      if (auto* rc = std::get_if<proto::relayed_call>(&*r)) answer(*rc);
      if (auto* ok = std::get_if<proto::ok>(&*r); ok && ok->id == id) return true;
    }
  };
  proto::drain d{proto::request_head{next_id}, {}};
  for (auto& [s, g] : held)
    d.shards.push_back(g.shard);
  c->send(d);
  wait_ok(next_id++);
  proto::idle idle{proto::request_head{next_id}, {}};
  for (auto& [s, g] : held)
    idle.entries.push_back(proto::idle_entry{g.shard,
                                             g.epoch,
                                             static_cast<uint8_t>(cfg.report_flags),
                                             cfg.due_in_ms ? cfg.due_in_ms : proto::nothing_due,
                                             steps[s],
                                             0,
                                             {}});
  c->send(idle);
  wait_ok(next_id++);
  c->close();
  return json_reply(200, "{\"invocation\":\"" + proto::format_invocation_id(req.invocation) +
                             "\",\"shards\":" + std::to_string(held.size()) +
                             ",\"calls\":" + std::to_string(calls) + "}");
}

}  // namespace

int run_handler(const handler_config& cfg) {
  auto at = parse_host_port(cfg.listen);
  if (!at) {
    std::fprintf(stderr, "fusee handler: --listen %s is not host:port\n", cfg.listen.c_str());
    return 2;
  }
  std::vector<std::string> secrets;
  for (auto& file : cfg.secret_files) {
    auto secret = client::read_secret_file(file);
    if (!secret) {
      std::fprintf(stderr, "fusee handler: --secret-file: %s\n", secret.err().message.c_str());
      return 2;
    }
    secrets.push_back(std::move(*secret));
    if (auto exposed = client::exposed_secret_file(file))
      std::fprintf(stderr, "fusee handler: warning: %s\n", exposed->c_str());
  }
  if (secrets.empty()) {
    std::fprintf(stderr, "fusee handler: --secret-file is required\n");
    return 2;
  }
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);  // a reload, as the server's: it stops nothing
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  worker::registry types;
  add_demo_workflows(types);
  worker::worker_options wopts;
  wopts.name = "fusee-handler";
  wopts.linger_ms = cfg.linger_ms;
  wopts.max_appends_in_flight = cfg.max_appends_in_flight;
  wopts.security = cfg.security;
  std::string err;
  http_server::options o;
  o.max_body = proto::max_invocation_body;
  // Two of the largest bodies at once past each one's first 64 KiB (a real invocation's is a few
  // hundred bytes): connections that send large bodies slowly cannot take the memory before
  // their signatures are checked, nor keep a real invocation out.
  o.max_bodies = 2 * proto::max_invocation_body;
  o.max_connections = cfg.max_connections;
  // Refused before the body is read: not a POST, or a signature header that no body can make
  // good (missing, malformed, out of the clock's tolerance). Its digest needs the body.
  o.g = [&](const http_exchange& ex) -> std::optional<http_reply> {
    if (ex.method != "POST") return json_reply(405, json_error("POST only"));
    auto sig = ex.headers.find("fusee-signature");
    auto bad = sig == ex.headers.end()
                   ? std::optional<proto::signature_failure>{proto::signature_failure{
                         proto::signature_error::malformed, "no fusee-signature header"}}
                   : proto::check_header(sig->second, proto::unix_ms(), cfg.tolerance_ms);
    if (!bad) return std::nullopt;
    // Anyone who reaches the port can send these: one line a minute per reason, with a count.
    static server::logging::warning_limiter said;
    uint64_t unsaid = 0;
    if (said.admit("header " + std::to_string(static_cast<int>(bad->reason)), &unsaid))
      std::fprintf(stderr, "fusee handler: refused a POST before its body: 401 %s%s\n",
                   bad->message.c_str(),
                   unsaid == 0 ? ""
                               : (" (and " + std::to_string(unsaid) +
                                  " more like it since the last such line: one a minute is)")
                                     .c_str());
    return json_reply(401, json_error(bad->message));
  };
  o.limit_name = "fusee handler --max-connections";
  auto srv = http_server::start(
      at->host, at->port,
      [&](const http_exchange& ex) {
        auto received = std::chrono::steady_clock::now();
        if (ex.method != "POST") return json_reply(405, json_error("POST only"));
        if (cfg.fail_status) return json_reply(cfg.fail_status, json_error("configured to fail"));
        auto sig = ex.headers.find("fusee-signature");
        auto checked = worker::verify_invocation(sig == ex.headers.end() ? "" : sig->second,
                                                 ex.body, secrets, cfg.tolerance_ms);
        if (!checked.request) {  // the reason names no secret
          std::fprintf(stderr, "fusee handler: refused a POST: %u %s\n",
                       checked.refusal.http_status, checked.refusal.body.c_str());
          return json_reply(checked.refusal.http_status, checked.refusal.body);
        }
        auto& req = checked.request;
        std::string reasons, shards;
        for (uint8_t bit = 1; bit <= proto::reason_code; bit <<= 1)
          if (req->reasons & bit)
            (reasons += reasons.empty() ? "" : ",") += proto::reason_name(bit);
        for (auto s : req->shards)
          (shards += shards.empty() ? "" : ",") += std::to_string(s.value());
        std::fprintf(stderr, "fusee handler: invocation %s shards [%s] reasons [%s] server %s\n",
                     proto::format_invocation_id(req->invocation).c_str(), shards.c_str(),
                     reasons.c_str(), req->server.c_str());
        if (cfg.mode == "echo") return run_invocation(cfg, *req, received);
        worker::runtime rt(types, wopts);
        auto out = rt.invoke(*req);
        return json_reply(out.http_status, out.body);
      },
      &err, std::move(o));
  if (!srv) {
    std::fprintf(stderr, "fusee handler: %s\n", err.c_str());
    return 1;
  }
  std::fprintf(stderr, "fusee handler: serving invocations on %s:%u\n", at->host.c_str(),
               srv->port());
  if (!cfg.ready_file.empty()) {  // (replaces a stale one at once)
    auto line = "listen=" + at->host + ":" + std::to_string(srv->port()) + "\n";
    if (auto why = write_ready_file(cfg.ready_file, line)) {
      std::fprintf(stderr, "fusee handler: %s: stopping\n", why->c_str());
      return 1;
    }
  }
  int sig = 0;
  while (sigwait(&stop, &sig) == 0 && sig == SIGHUP)
    std::fprintf(stderr, "fusee handler: SIGHUP: the token file is read again at each connection "
                         "to the server; nothing else to reload\n");
  remove_ready_file(cfg.ready_file);
  return 0;
}

}  // namespace fusee::app
