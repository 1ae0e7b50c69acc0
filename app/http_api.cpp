#include "app/http_api.hpp"

#include <atomic>
#include <charconv>
#include <mutex>
#include <unordered_map>

#include <caf/all.hpp>
#include <simdjson.h>

#include "actors/call_gateway.hpp"
#include "app/bearer.hpp"
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

api_route refuse(unsigned status, const std::string& message) {
  return api_route{std::nullopt, api_refusal{status, proto::json_error(message)}};
}

/// Path segments of /a/b/c (empty segments dropped).
std::vector<std::string> segments(const std::string& path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string::npos) j = path.size();
    if (j > i) out.push_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

/// Ids, types and signal names: 1-256 bytes of printable ASCII other than '/' (they sit in
/// paths), or any UTF-8 from byte 0x80 up.
std::optional<std::string> bad_name(const char* what, const std::string& v) {
  if (v.empty() || v.size() > 256)
    return std::string{what} + " must be 1 to 256 bytes, not " + std::to_string(v.size());
  for (unsigned char c : v)
    if (c < 0x20 || c == 0x7f) return std::string{what} + " must not contain control characters";
  if (!proto::valid_utf8(proto::as_bytes(v))) return std::string{what} + " must be UTF-8";
  return std::nullopt;
}

/// The body as JSON text: empty means null; anything else must be one valid JSON value.
std::optional<std::string> json_body(const std::string& body, std::string* err) {
  size_t start = body.find_first_not_of(" \t\r\n");
  if (start == std::string::npos) return std::string{"null"};
  simdjson::dom::parser parser;
  simdjson::padded_string padded(body);
  auto doc = parser.parse(padded);
  if (doc.error()) {
    *err = std::string{"the body is not JSON: "} + simdjson::error_message(doc.error());
    return std::nullopt;
  }
  return body.substr(start);
}

std::string result_args(const std::string& id, uint64_t wait_ms) {
  return "{\"id\":" + proto::json_quote(id) + ",\"wait_ms\":" + std::to_string(wait_ms) + "}";
}

}  // namespace

api_route route_api_request(const http_exchange& ex) {
  auto seg = segments(ex.path);
  if (seg.size() < 3 || seg[0] != "v1" || seg[1] != "workflows")
    return refuse(404, "no route " + ex.method + " " + ex.path +
                           "; routes: POST /v1/workflows/{type}/{id}, GET /v1/workflows/{id}, "
                           "POST /v1/workflows/{id}/signals/{name}, "
                           "POST /v1/workflows/{id}/cancel");
  api_request r;
  std::string err;
  auto check = [&](const char* what, const std::string& v) {
    if (auto bad = bad_name(what, v)) {
      err = *bad;
      return false;
    }
    return true;
  };
  const std::string& id = seg[2];
  if (ex.method == "GET" && (seg.size() == 3 || (seg.size() == 4 && seg[3] == "describe"))) {
    if (!check("workflow id", id)) return refuse(400, err);
    r.workflow = id;
    r.method = seg.size() == 3 ? "result" : "describe";
    if (auto w = ex.query.find("wait_ms"); w != ex.query.end()) {
      uint64_t v = 0;
      auto [p, ec] = std::from_chars(w->second.data(), w->second.data() + w->second.size(), v);
      if (ec != std::errc{} || p != w->second.data() + w->second.size() || v > 600000)
        return refuse(400, "wait_ms must be an integer from 0 to 600000, not '" + w->second + "'");
      r.wait_ms = v;
    }
    r.args = r.method == "result" ? result_args(id, r.wait_ms)
                                  : "{\"id\":" + proto::json_quote(id) + "}";
    return api_route{r, std::nullopt};
  }
  if (ex.method == "GET") return refuse(404, "no route GET " + ex.path);
  if (ex.method != "POST")
    return refuse(405,
                  ex.method + " " + ex.path + ": use GET to read a workflow, POST to change it");
  if (seg.size() == 4 && seg[3] == "cancel") {
    if (!check("workflow id", id)) return refuse(400, err);
    r.method = "cancel";
    r.workflow = id;
    r.args = "{\"id\":" + proto::json_quote(id) + "}";
    return api_route{r, std::nullopt};
  }
  if (seg.size() == 5 && seg[3] == "signals") {
    if (!check("workflow id", id) || !check("signal name", seg[4])) return refuse(400, err);
    auto payload = json_body(ex.body, &err);
    if (!payload) return refuse(400, err);
    r.method = "signal";
    r.workflow = id;
    r.args = "{\"id\":" + proto::json_quote(id) + ",\"name\":" + proto::json_quote(seg[4]) +
             ",\"payload\":" + *payload + "}";
    return api_route{r, std::nullopt};
  }
  if (seg.size() == 4) {  // POST /v1/workflows/{type}/{id}
    const std::string& type = seg[2];
    const std::string& wid = seg[3];
    if (!check("workflow type", type) || !check("workflow id", wid)) return refuse(400, err);
    auto input = json_body(ex.body, &err);
    if (!input) return refuse(400, err);
    r.method = "start";
    r.workflow = wid;
    r.type = type;
    r.args = "{\"id\":" + proto::json_quote(wid) + ",\"type\":" + proto::json_quote(type) +
             ",\"input\":" + *input + "}";
    return api_route{r, std::nullopt};
  }
  return refuse(404, "no route POST " + ex.path);
}

http_reply api_reply(const std::string& method, uint8_t status, const std::string& body) {
  using proto::call_status;
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
    return json_reply(http, body);
  }
  case call_status::parked_too_long:
  case call_status::holder_lost:
    return json_reply(503, body);
  case call_status::bad_request:
    return json_reply(400, body);
  }
  return json_reply(502, proto::json_error("unknown call status " + std::to_string(status)));
}

struct http_api::impl final : server::call_results {
  caf::actor_system* sys = nullptr;
  std::unique_ptr<http_server> server;
  server::call_gateway_actor gateway;
  uint32_t shards = 1;
  uint32_t park_ms = 0;
  std::shared_ptr<server::token_store> tokens;  ///< null or empty: no bearer token needed
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
      w->respond(
          json_reply(504, proto::json_error("no answer from the workflow's worker in time")));
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
    if (route.refusal) return respond(json_reply(route.refusal->status, route.refusal->body));
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
                                          tls::ctx_ptr tls) {
  std::unique_ptr<http_api> api{new http_api};
  api->impl_ = std::make_unique<impl>();
  auto* im = api->impl_.get();
  im->sys = &sys;
  im->shards = settings.shards;
  im->park_ms = settings.park_ms;
  im->tokens = std::move(tokens);
  im->gateway = server::spawn_call_gateway(sys, std::move(directory), im);
  im->server = http_server::start_async(
      host, port, [im](const http_exchange& ex, http_responder r) { im->serve(ex, std::move(r)); },
      err, size_t{settings.http_body_kb} << 10, std::move(tls));
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

uint16_t http_api::port() const {
  return impl_->server->port();
}

server::call_gateway_actor http_api::gateway() const {
  return impl_->gateway;
}

}  // namespace fusee::app
