#include "app/admin_routes.hpp"

#include "app/bearer.hpp"
#include "app/host_check.hpp"

#include <chrono>
#include <memory>
#include <mutex>

#include "actors/inspect/query.hpp"
#include "actors/net/connection.hpp"
#include "app/dashboard_assets.hpp"
#include "app/inspect_json.hpp"
#include "app/prometheus.hpp"
#include "logging/logging.hpp"
#include "protocol/json_text.hpp"

namespace fusee::app {

namespace {

using server::inspect_query;
using server::inspect_reply;

http_reply json(unsigned status, std::string body) {
  return http_reply{status, "application/json", std::move(body)};
}

/// Asks the inspector; nullopt if it did not answer within the query's deadline and a margin.
std::optional<inspect_reply> ask(caf::actor_system& sys, const server::inspector_actor& insp,
                                 const inspect_query& q) {
  caf::scoped_actor self{sys};
  std::optional<inspect_reply> out;
  self->request(insp, std::chrono::milliseconds(q.deadline_ms + 5000), q)
      .receive([&](inspect_reply& r) { out = std::move(r); }, [&](caf::error&) {});
  return out;
}

http_reply no_inspector() {
  return json(503, proto::json_error("the node's inspector did not answer"));
}

/// /v1/actors and its kind-fixed forms: the query string's filters, then the inspector's answer.
http_reply query_route(caf::actor_system& sys, const admin_context& ctx, const http_exchange& ex,
                       const char* kind) {
  auto args = ex.query;
  if (kind && args.count("kind") && args["kind"] != kind) {
    // (An unknown kind is named as that: the kinds' list says what there is.)
    if (auto other = server::parse_query({{"kind", args["kind"]}}); !other)
      return json(400, proto::json_error(other.err().message));
    return json(400, proto::json_error(std::string("this route lists ") + kind +
                                       " actors only; use /v1/actors?kind=" + args["kind"]));
  }
  if (kind) args["kind"] = kind;
  auto q = server::parse_query(args);
  if (!q) return json(400, proto::json_error(q.err().message));
  auto r = ask(sys, ctx.inspector, *q);
  if (!r) return no_inspector();
  if (auto missing = server::missing_shard(*q, r->shards))
    return json(404, proto::json_error(*missing));
  return json(200, reply_json(*r, q->offset));
}

/// One actor: /v1/shards/{n}, /v1/log.
http_reply single_route(caf::actor_system& sys, const admin_context& ctx, inspect_query q,
                        const std::string& what) {
  q.limit = 1;
  auto r = ask(sys, ctx.inspector, q);
  if (!r) return no_inspector();
  if (auto missing = server::missing_shard(q, r->shards))  // says how many the node has
    return json(404, proto::json_error(*missing));
  if (r->rows.empty()) return json(404, proto::json_error("no " + what + " on this node"));
  return json(200, row_json(r->rows.front()));
}

/// The log's failure, "" while it works (or nobody can tell).
std::string log_failure(const admin_context& ctx) {
  return ctx.log_failure ? ctx.log_failure() : std::string{};
}

/// /v1/invoker: the scheduler's and endpoints' metrics with the original's camelCase keys.
/// Without endpoints there is no scheduler: `halted` then says whether the log failed (no
/// invocation could go out until restart), as a scheduler's would.
http_reply invoker_metrics(caf::actor_system& sys, const admin_context& ctx) {
  caf::scoped_actor self{sys};
  uint64_t parked = 0;
  self->request(ctx.directory, std::chrono::seconds(5), server::parked_atom::value)
      .receive([&](uint64_t n) { parked = n; }, [&](caf::error&) {});
  if (!ctx.scheduler)
    return json(200, R"({"endpoints":[],"dueShards":0,"invokingShards":0,"backoffShards":0,)"
                     R"("handbacks":0,"crashes":0,"noProgress":0,"parkedCalls":)" +
                         std::to_string(parked) + R"(,"halted":)" +
                         (log_failure(ctx).empty() ? "false" : "true") + "}");
  std::string body;
  self->request(ctx.scheduler, std::chrono::seconds(5), server::metrics_atom::value, parked)
      .receive([&](std::string& j) { body = std::move(j); }, [&](caf::error&) {});
  if (body.empty()) return json(503, R"({"error":"the invoker did not answer"})");
  return json(200, std::move(body));
}

/// /healthz: the process serves and its log works. A failed write, fdatasync or segment roll
/// leaves the log refusing every append until restart: the probe fails. (No token is needed
/// here, so the failure's text, which names files, is left to /v1/log and the server's log.)
http_reply health(const admin_context& ctx) {
  if (log_failure(ctx).empty()) return json(200, R"({"status":"ok"})");
  return json(503, R"({"status":"log failed","see":"/v1/log"})");
}

/// /readyz: the log is recovered (the server answers only once it is) and works, the listeners
/// are up (likewise), and the invoker, when configured, has its wake records and dispatches (or
/// did until the log failed: invokerStarted stays true, logFailed says why it is not ready).
http_reply readiness(caf::actor_system& sys, const admin_context& ctx) {
  bool invoker = !ctx.invoker_configured;
  if (ctx.scheduler) {
    caf::scoped_actor self{sys};
    self->request(ctx.scheduler, std::chrono::seconds(2), server::stats_atom::value)
        .receive([&](server::actor_stats& s) { invoker = s.state != "starting"; },
                 [&](caf::error&) {});
  }
  auto failure = log_failure(ctx);
  bool ready = invoker && failure.empty();
  std::string body = std::string("{\"ready\":") + (ready ? "true" : "false") +
                     ",\"logRecovered\":true,\"listening\":true,\"invokerStarted\":" +
                     (invoker ? "true" : "false");
  if (!failure.empty()) body += ",\"logFailed\":true";
  return json(ready ? 200 : 503, body + "}");
}

/// /metrics, gathered at most once a second.
class metrics_cache {
public:
  http_reply get(caf::actor_system& sys, const admin_context& ctx) {
    std::lock_guard<std::mutex> lk{mtx_};
    auto now = std::chrono::steady_clock::now();
    if (!text_.empty() && now - at_ < std::chrono::seconds(1))
      return http_reply{200, content_type, text_};
    inspect_query others;  // every actor but the shards
    others.shard_from = 1;
    others.shard_to = 0;
    others.every_actor = true;
    others.limit = inspect_query::max_limit;
    inspect_query shards;  // the shards' states, and mailboxes from a spread sample; no rows
    shards.kind = "shard";
    shards.every_actor = true;
    shards.sample = shard_sample;
    shards.limit = 0;
    auto a = ask(sys, ctx.inspector, others);
    auto s = ask(sys, ctx.inspector, shards);
    if (!a || !s) return http_reply{503, "text/plain", "the node's inspector did not answer\n"};
    guard_counts guards;
    if (ctx.tokens && ctx.tokens->required())
      guards.auth =
          auth_counts{ctx.tokens->tokens()->size(), ctx.tokens->refused(), ctx.tokens->reloads()};
    if (ctx.limits) {
      guards.connections = ctx.limits->open();
      for (auto l : server::connection_limits::all)
        guards.limit_refused.emplace_back(server::connection_limits::name(l),
                                          ctx.limits->refused(l));
      if (ctx.api_server)
        guards.limit_refused.emplace_back("http_body", ctx.api_server->bodies_refused());
    }
    auto* own = ctx.own_server->load();
    uint64_t http_refused = 0;  // both HTTP listeners, one limit
    for (auto [name, server] : {std::pair{"admin", own}, std::pair{"http", ctx.api_server}}) {
      if (server == nullptr) continue;
      guards.http_connections.emplace_back(name, server->connections_open());
      http_refused += server->connections_refused();
    }
    if (ctx.api_server)
      guards.http_clients_gone.emplace_back("http", ctx.api_server->clients_gone());
    if (ctx.limits) guards.limit_refused.emplace_back("http_connections", http_refused);
    if (ctx.cluster_links)  // either places: the nodes' own or the strangers'
      guards.limit_refused.emplace_back("cluster_links", ctx.cluster_links->refused());
    if (ctx.inspect_links)
      guards.limit_refused.emplace_back("inspect_connections", ctx.inspect_links->refused());
    if (ctx.io_turns)
      guards.io_turn_seconds =
          double(ctx.io_turns->take_longest_ns(server::connection::now_ns())) / 1e9;
    auto terminators = ctx.terminators;
    if (own && own->tls()) terminators.emplace_back("admin", own->tls());
    for (auto& [name, t] : terminators)
      guards.tls.push_back({name, t->handshakes(), t->failures(), t->timeouts(), t->plaintext()});
    text_ = render_metrics(*a, *s, guards);
    at_ = now;
    return http_reply{200, content_type, text_};
  }

private:
  static constexpr const char* content_type = "text/plain; version=0.0.4; charset=utf-8";
  static constexpr uint32_t shard_sample = 1000;
  std::mutex mtx_;
  std::string text_;
  std::chrono::steady_clock::time_point at_{};
};

/// The last warnings and errors as a JSON array of lines, oldest first.
std::string problems_json() {
  std::string body = "[";
  auto problems = server::logging::recent_problems();
  for (size_t i = 0; i < problems.size(); ++i)
    body += (i ? "," : "") + proto::json_quote(problems[i]);
  return body + "]";
}

/// /v1/overview: what the dashboard draws each second, in one answer and without asking any
/// shard actor: the node's other actors, the shards' grid and state counts, recent problems.
http_reply overview(caf::actor_system& sys, const admin_context& ctx) {
  auto others = server::node_actors_query();
  inspect_query grid;
  grid.kind = "shard";
  grid.limit = 0;
  grid.grid = true;
  auto a = ask(sys, ctx.inspector, others);
  auto g = ask(sys, ctx.inspector, grid);
  if (!a || !g) return no_inspector();
  std::string members = "[]";  // the cluster's nodes as this node sees them (no peer is asked)
  if (ctx.cluster) {
    caf::scoped_actor self{sys};
    self->request(ctx.cluster, std::chrono::seconds(2), server::members_atom::value)
        .receive([&](std::vector<server::cluster_member>& m) { members = members_json(m); },
                 [&](caf::error&) {});
  }
  return json(200, "{\"actors\":" + reply_json(*a, 0) + ",\"shards\":" + reply_json(*g, 0) +
                       ",\"cluster\":" + members + ",\"problems\":" + problems_json() + "}");
}

/// /v1/cluster: the query (default: every node's actors but its shards) on every node,
/// through their inspectors.
http_reply cluster_route(caf::actor_system& sys, const admin_context& ctx,
                         const http_exchange& ex) {
  auto q = ex.query.empty() ? server::node_actors_query() : server::parse_query(ex.query);
  if (!q) return json(400, proto::json_error(q.err().message));
  caf::scoped_actor self{sys};
  std::optional<http_reply> out;
  self->request(ctx.inspector, std::chrono::milliseconds(q->deadline_ms + 5000),
                server::members_atom::value, *q)
      .receive([&](server::cluster_reply& r) { out = json(200, cluster_json(r, q->offset)); },
               [&](caf::error& e) {
                 out = json(503, proto::json_error("the node's inspector did not answer: " +
                                                   sys.render(e)));
               });
  return *out;
}

}  // namespace

http_server::gate admin_gate(const admin_context& ctx) {
  return [hosts = ctx.hosts, tokens = ctx.tokens](const http_exchange& ex) {
    bool probe = ex.path == "/healthz" || ex.path == "/readyz";
    if (auto refused = probe ? std::nullopt : check_host(ex, hosts, tokens.get())) return refused;
    if (ex.method != "GET" && ex.method != "HEAD") {  // (HEAD: libmicrohttpd sends no body)
      auto reply = json(
          405, proto::json_error("the admin server answers GET (and HEAD) only, not " + ex.method));
      reply.headers["Allow"] = "GET, HEAD";
      return std::optional{reply};
    }
    return std::optional<http_reply>{};
  };
}

http_server::handler admin_routes(caf::actor_system& sys, admin_context ctx) {
  auto metrics = std::make_shared<metrics_cache>();
  return [&sys, ctx, metrics, gate = admin_gate(ctx)](const http_exchange& ex) {
    if (auto refused = gate(ex)) return *refused;
    auto& p = ex.path;
    if (p == "/" || p == "/index.html")
      return http_reply{200, "text/html; charset=utf-8", std::string(dashboard_html())};
    if (p == "/dashboard.js")
      return http_reply{200, "text/javascript; charset=utf-8", std::string(dashboard_js())};
    if (p == "/dashboard.css")
      return http_reply{200, "text/css; charset=utf-8", std::string(dashboard_css())};
    if (p == "/healthz") return health(ctx);
    if (p == "/readyz") return readiness(sys, ctx);
    if (auto refused = check_bearer(ex, ctx.tokens.get(), proto::scope::read)) return *refused;
    // The /v1 views are strict about their parameters (the page, its assets, the probes and
    // /metrics take any: a browser's, a prober's or a scrape job's additions are not mistakes).
    if (p.rfind("/v1/", 0) == 0 && !ex.repeated_query.empty())
      return json(
          400, proto::json_error("query parameter \"" + ex.repeated_query + "\" is given twice"));
    if (!ex.query.empty() && (p == "/v1/invoker" || p == "/v1/overview" || p == "/v1/log" ||
                              p == "/v1/problems" || p.rfind("/v1/shards/", 0) == 0))
      return json(400, proto::json_error("GET " + p + " takes no query parameters, not \"" +
                                         ex.query.begin()->first + "\""));
    if (p == "/metrics") return metrics->get(sys, ctx);
    if (p == "/v1/invoker") return invoker_metrics(sys, ctx);
    if (p == "/v1/overview") return overview(sys, ctx);
    if (p == "/v1/actors") return query_route(sys, ctx, ex, nullptr);
    if (p == "/v1/cluster") return cluster_route(sys, ctx, ex);
    if (p == "/v1/shards") return query_route(sys, ctx, ex, "shard");
    if (p == "/v1/endpoints") return query_route(sys, ctx, ex, "endpoint");
    if (p == "/v1/sessions") return query_route(sys, ctx, ex, "session");
    if (p == "/v1/log") {
      inspect_query q;
      q.kind = "log";
      return single_route(sys, ctx, q, "log");
    }
    if (p.rfind("/v1/shards/", 0) == 0) {
      auto n = p.substr(11);
      auto q = server::parse_query({{"shard", n}});
      if (!q || n.find('-') != std::string::npos)
        return json(400, proto::json_error("\"" + n + "\" is not a shard number"));
      return single_route(sys, ctx, *q, "shard " + n);
    }
    if (p == "/v1/problems") return json(200, problems_json());
    return json(404, proto::json_error("no such admin endpoint: " + ex.method + " " + p));
  };
}

}  // namespace fusee::app
