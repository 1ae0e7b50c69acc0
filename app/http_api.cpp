#include "app/http_api.hpp"

#include <atomic>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <caf/all.hpp>
#include <simdjson.h>

#include "actors/call_gateway.hpp"
#include "app/bearer.hpp"
#include "app/browser_origin.hpp"
#include "app/host_check.hpp"
#include "protocol/auth.hpp"
#include "protocol/json_text.hpp"
#include "protocol/messages.hpp"
#include "protocol/shard_hash.hpp"

namespace fusee::app {

namespace {

/// Bodies end with a newline, so consecutive curl outputs stay one JSON value per line.
http_reply json_reply(unsigned status, std::string body) {
  body += '\n';
  return http_reply{status, "application/json", std::move(body)};
}

/// An {"error": ...} without a code of its own (a non-empty string), such as the server's call
/// errors (PROTOCOL.md's CALL_RESULT statuses 2-4), with `code`; nullopt for any other body.
std::optional<std::string> with_code(const std::string& body, std::string_view code) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(body);
  auto doc = parser.parse(padded);
  std::string_view message, own;
  if (doc.error() || !doc.value().is_object() || doc.value()["error"].get(message) ||
      (!doc.value()["code"].get(own) && !own.empty()))
    return std::nullopt;
  return proto::json_error(message, code);
}

}  // namespace

http_reply api_reply(const std::string& method, uint8_t status, const std::string& body) {
  using proto::call_status;
  auto server_code = proto::call_status_code(static_cast<call_status>(status));  // "" for ok
  switch (static_cast<call_status>(status)) {
  case call_status::ok: {
    // A start that made a new run is 201; everything else that worked is 200.
    bool created = false;
    if (method == "start") {
      simdjson::dom::parser parser;
      simdjson::padded_string padded(body);
      auto doc = parser.parse(padded);
      bool existing = true;
      if (!doc.error() && doc.value().is_object() && !doc.value()["existing"].get(existing))
        created = !existing;
    }
    return json_reply(created ? 201 : 200, body);
  }
  case call_status::failed: {
    // The worker refused: its JSON error carries a code.
    unsigned http = 400;
    simdjson::dom::parser parser;
    simdjson::padded_string padded(body);
    auto doc = parser.parse(padded);
    std::string_view code;
    if (!doc.error() && doc.value().is_object()) {
      auto c = doc.value()["code"];
      if (!c.error() && c.is_string()) code = c.get_string().value();
    }
    if (code == "not_found") http = 404;
    if (code == "conflict" || code == "finished") http = 409;
    if (code == "too_large") http = 500;  // the answer could not be carried back
    if (!code.empty()) return json_reply(http, body);
    // A worker of another implementation may leave the code out, or send no {"error": ...}.
    return json_reply(http,
                      with_code(body, server_code)
                          .value_or(proto::json_error("the worker refused: " + body, server_code)));
  }
  case call_status::parked_too_long:
  case call_status::holder_lost:
    return json_reply(503, with_code(body, server_code).value_or(body));
  case call_status::bad_request:
    return json_reply(400, with_code(body, server_code).value_or(body));
  }
  return json_reply(
      502, proto::json_error("unknown call status " + std::to_string(status), "bad_status"));
}

struct http_api::impl final : server::call_results {
  caf::actor_system* sys = nullptr;
  std::unique_ptr<http_server> server;
  server::call_gateway_actor gateway;
  uint32_t shards = 1;
  uint32_t park_ms = 0;
  std::shared_ptr<server::token_store> tokens;        ///< null or empty: no bearer token needed
  host_allow_list hosts{std::vector<std::string>{}};  // set by start()
  std::atomic<uint64_t> next_ticket{1};
  std::mutex mu;
  struct waiting {
    api_request req;
    http_responder respond;
    std::chrono::steady_clock::time_point wait_until;  // for `result` with wait_ms
  };
  std::unordered_map<uint64_t, waiting> pending;

  void on_call_result(uint64_t ticket, std::optional<proto::call_result> r) override {
    std::optional<waiting> w;
    {
      std::lock_guard lock(mu);
      auto it = pending.find(ticket);
      if (it == pending.end()) return;
      w.emplace(std::move(it->second));
      pending.erase(it);
    }
    if (!r) {
      w->respond(json_reply(
          504, proto::json_error("no answer from the workflow's worker in time", "timeout")));
      return;
    }
    std::string body(r->body.begin(), r->body.end());
    // A worker that leaves answers a waiting `result` with the run's state at that moment; the
    // wait the client asked for goes on with whoever holds the shard next.
    auto now = std::chrono::steady_clock::now();
    if (w->req.method == "result" && r->status == 0 &&
        now + std::chrono::milliseconds(50) < w->wait_until && still_running(body)) {
      w->req.wait_ms = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::milliseconds>(w->wait_until - now).count());
      w->req.args = result_args(w->req.workflow, w->req.wait_ms);
      return call(std::move(*w));
    }
    w->respond(api_reply(w->req.method, r->status, body));
  }

  static bool still_running(const std::string& body) {
    simdjson::dom::parser parser;
    simdjson::padded_string padded(body);
    auto doc = parser.parse(padded);
    std::string_view status;
    return !doc.error() && doc.value().is_object() && !doc.value()["status"].get(status) &&
           status == "running";
  }

  /// Sends the CALL of `w` under a fresh ticket.
  void call(waiting w) {
    uint64_t ticket = next_ticket++;
    auto req = w.req;
    {
      std::lock_guard lock(mu);
      pending.emplace(ticket, std::move(w));
    }
    // The worker may take park_ms to appear, then wait_ms for the result; 10 s on top for it to
    // answer.
    uint64_t deadline = std::min<uint64_t>(uint64_t{park_ms} + req.wait_ms + 10000, 0xFFFFFFFFu);
    caf::anon_send(gateway, server::gateway_call{
                                ticket, proto::shard_for(req.workflow, shards).value(), req.method,
                                req.type, proto::bytes(req.args.begin(), req.args.end()), 0,
                                static_cast<uint32_t>(deadline)});
  }

  void serve(const http_exchange& ex, http_responder respond) {
    if (auto refused = check_bearer(ex, tokens.get(), proto::scope::read))
      return respond(std::move(*refused));
    auto route = route_api_request(ex);
    if (route.refusal) {
      auto reply = json_reply(route.refusal->status, route.refusal->body);
      if (!route.refusal->allow.empty()) reply.headers["Allow"] = route.refusal->allow;
      return respond(std::move(reply));
    }
    auto needed =
        proto::is_read_method(route.call->method) ? proto::scope::read : proto::scope::client;
    if (auto refused = check_bearer(ex, tokens.get(), needed)) return respond(std::move(*refused));
    auto wait = std::chrono::milliseconds(route.call->wait_ms);
    call(waiting{std::move(*route.call), std::move(respond),
                 std::chrono::steady_clock::now() + wait});
  }
};

std::unique_ptr<http_api> http_api::start(caf::actor_system& sys, server::directory_actor directory,
                                          const server::node_settings& settings,
                                          std::shared_ptr<server::token_store> tokens,
                                          const std::string& host, uint16_t port, std::string* err,
                                          tls::ctx_ptr tls, uint32_t max_connections) {
  std::unique_ptr<http_api> api{new http_api};
  api->impl_ = std::make_unique<impl>();
  auto* im = api->impl_.get();
  im->sys = &sys;
  im->shards = settings.shards;
  im->park_ms = settings.park_ms;
  im->tokens = std::move(tokens);
  im->hosts = host_allow_list::for_node(settings, tls != nullptr);
  im->gateway = server::spawn_call_gateway(sys, std::move(directory), im);
  http_server::options o;
  o.max_body = size_t{settings.http_body_kb} << 10;
  o.tls = std::move(tls);
  // Before the body is read: a Host it is not configured under (without tokens), a web page of
  // another origin, or no token at all (the route's scope is checked once the body is read).
  o.g = [im](const http_exchange& ex) {
    if (auto refused = check_host(ex, im->hosts, im->tokens.get())) return refused;
    if (auto refused = check_origin(ex, im->hosts)) return refused;
    return check_bearer(ex, im->tokens.get(), proto::scope::read);
  };
  o.max_connections = max_connections;
  im->server = http_server::start_async(
      host, port, [im](const http_exchange& ex, http_responder r) { im->serve(ex, std::move(r)); },
      err, std::move(o));
  if (!im->server) {
    caf::anon_send_exit(im->gateway, caf::exit_reason::user_shutdown);
    return nullptr;
  }
  return api;
}

http_api::~http_api() {
  if (!impl_) return;
  impl_->server.reset();  // answers the suspended requests with 503
  // The gateway calls back into impl_: it must be gone before impl_ is.
  caf::scoped_actor self{*impl_->sys};
  self->send_exit(impl_->gateway, caf::exit_reason::user_shutdown);
  self->wait_for(impl_->gateway);
}

const http_server& http_api::server() const {
  return *impl_->server;
}

const tls::terminator* http_api::tls() const {
  return impl_->server->tls();
}

uint16_t http_api::port() const {
  return impl_->server->port();
}

server::call_gateway_actor http_api::gateway() const {
  return impl_->gateway;
}

}  // namespace fusee::app
