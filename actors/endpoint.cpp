#include "actors/endpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <unordered_map>

#include "actors/http_client.hpp"
#include "actors/invoker_rules.hpp"
#include "logging/logging.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/json_text.hpp"
#include "protocol/signature.hpp"
#include "protocol/unix_time.hpp"

namespace fusee::server {

namespace {

using clock_type = caf::actor_clock::clock_type;
using ms = std::chrono::milliseconds;
using proto::json_quote;

struct endpoint_metrics {
  uint64_t invocations = 0, succeeded = 0, failed = 0, timed_out = 0, unleased = 0;
  /// 2xx from a worker that connected back but whose shards other workers had leased meanwhile
  /// (a race with long-lived workers, not the endpoint's fault: no failure, no backoff)
  uint64_t preempted = 0;
  uint64_t total_ms = 0, max_ms = 0, shards = 0, steps = 0, open_us_total = 0, opens = 0;
  uint64_t backoffs = 0;  ///< failures that started or lengthened a backoff
  std::string last_error;
  int64_t last_error_ms = 0;  ///< unix ms of last_error
  histogram duration{"invocation_duration_seconds", latency_bounds()};
};

struct invocation {
  std::vector<uint32_t> shards;
  uint64_t session = 0;  ///< bound worker connection, 0 = none yet
  bool leased = false;
  clock_type::time_point started;
};

struct endpoint_state {
  uint32_t index = 0;
  endpoint_settings cfg;
  std::string server_address;
  uint32_t close_grace_ms = 2000;
  http_sender* http = nullptr;
  scheduler_actor scheduler;
  fence_actor directory;
  std::unordered_map<uint64_t, invocation> invocations;
  uint32_t failures = 0;
  clock_type::time_point last_counted{};  ///< when the last failure that counted was seen
  clock_type::time_point not_before{};
  clock_type::time_point logged{};
  std::string told_trouble;  ///< what the directory last heard (endpoint_trouble)
  endpoint_metrics m;
  std::mt19937_64 rng{std::random_device{}()};
  static inline const char* name = "endpoint";
};

using endpoint_ptr = endpoint_actor::stateful_pointer<endpoint_state>;

/// ": " and the start of an endpoint's error answer (where it says why), at most 200 bytes on one
/// line; nothing if it is empty.
std::string answer_excerpt(const std::string& body) {
  std::string out;
  for (char c : body.substr(0, 200))
    out += static_cast<unsigned char>(c) < 0x20 || c == 0x7F ? ' ' : c;
  while (!out.empty() && out.back() == ' ')
    out.pop_back();
  return out.empty() ? out : ": " + out;
}

std::string endpoint_json(const endpoint_state& st, clock_type::time_point now) {
  std::ostringstream o;
  long backoff_ms =
      st.not_before > now ? std::chrono::duration_cast<ms>(st.not_before - now).count() : 0;
  o << "{\"url\":" << json_quote(logging::display_url(st.cfg.url)) << ",\"types\":[";
  for (size_t i = 0; i < st.cfg.types.size(); ++i)
    o << (i ? "," : "") << json_quote(st.cfg.types[i]);
  o << "],\"invocations\":" << st.m.invocations << ",\"succeeded\":" << st.m.succeeded
    << ",\"failed\":" << st.m.failed << ",\"timedOut\":" << st.m.timed_out
    << ",\"unleased\":" << st.m.unleased << ",\"preempted\":" << st.m.preempted
    << ",\"inFlight\":" << st.invocations.size() << ",\"failuresInARow\":" << st.failures
    << ",\"backoffMs\":" << backoff_ms << ",\"totalMs\":" << st.m.total_ms
    << ",\"maxMs\":" << st.m.max_ms << ",\"shards\":" << st.m.shards << ",\"steps\":" << st.m.steps
    << ",\"openUsTotal\":" << st.m.open_us_total << ",\"opens\":" << st.m.opens
    << ",\"lastError\":" << (st.m.last_error.empty() ? "null" : json_quote(st.m.last_error))
    << ",\"lastErrorAtMs\":" << st.m.last_error_ms << "}";
  return o.str();
}

actor_stats stats_of(endpoint_ptr self);

/// "budget + grace (N ms)", the time a POST has for its answer.
std::string answer_deadline_text(const endpoint_state& st) {
  return "budget + grace (" +
         std::to_string(rules::answer_deadline_ms(st.cfg.budget_ms, st.cfg.grace_ms)) + " ms)";
}

/// Tells the directory what is wrong with the endpoint now ("" for nothing), if that changed.
void tell_trouble(endpoint_ptr self, std::string text) {
  auto& st = self->state;
  if (text == st.told_trouble) return;
  st.told_trouble = text;
  self->send(st.directory, endpoint_trouble{st.index, std::move(text)});
}

/// `error` becomes the endpoint's last error (with its time), and the directory hears of it as
/// "endpoint 0 (http://...): <error>".
void set_last_error(endpoint_ptr self, std::string error) {
  auto& st = self->state;
  st.m.last_error = std::move(error);
  st.m.last_error_ms = static_cast<int64_t>(proto::unix_ms());
  tell_trouble(self, "endpoint " + std::to_string(st.index) + " (" +
                         logging::display_url(st.cfg.url) + "): " + st.m.last_error);
}

endpoint_actor::behavior_type endpoint_fn(endpoint_ptr self, uint32_t index, endpoint_settings cfg,
                                          std::string server_address, uint32_t close_grace_ms,
                                          http_sender* http, scheduler_actor scheduler,
                                          fence_actor directory) {
  auto& st = self->state;
  st.index = index;
  st.cfg = std::move(cfg);
  st.server_address = std::move(server_address);
  st.close_grace_ms = close_grace_ms;
  st.http = http;
  st.scheduler = std::move(scheduler);
  st.directory = std::move(directory);
  return {
      [=](invoke_atom, uint64_t id, const std::vector<uint32_t>& shards, uint8_t reasons) {
        auto& st = self->state;
        proto::invocation_request body{1,       proto::invocation_id{id}, {}, st.cfg.budget_ms,
                                       reasons, st.server_address};
        for (auto s : shards)
          body.shards.emplace_back(s);
        http_request req;
        req.id = id;
        req.url = st.cfg.url;
        req.body = proto::to_json(body);
        req.headers = {"content-type: application/json"};
        if (!st.cfg.secret.empty())
          req.headers.push_back("fusee-signature: " +
                                proto::sign(st.cfg.secret, proto::unix_ms(), req.body));
        req.timeout_ms = rules::answer_deadline_ms(st.cfg.budget_ms, st.cfg.grace_ms);
        req.send_within_ms = rules::send_within_ms(st.cfg.budget_ms);
        req.ca_file = st.cfg.ca_file;
        req.cert_file = st.cfg.cert_file;
        req.key_file = st.cfg.key_file;
        req.done =
            [me = caf::actor_cast<endpoint_actor>(self)](http_result r) {  // on the curl thread
              caf::anon_send(me, std::move(r));
            };
        st.invocations[id] = invocation{shards, 0, false, self->clock().now()};
        st.m.invocations++;
        st.m.shards += shards.size();
        if (spdlog::should_log(spdlog::level::debug))
          spdlog::debug("invocation sent endpoint={} invocation={} shards={} reasons={}", st.index,
                        proto::format_invocation_id(proto::invocation_id{id}), shards.size(),
                        proto::reasons_text(reasons));
        st.http->submit(std::move(req));
      },
      [=](bind_request& b) -> bind_result {
        auto& st = self->state;
        bind_result r;
        auto i = st.invocations.find(b.invocation);
        if (i == st.invocations.end()) return r;  // unknown, or already over
        if (i->second.session != 0) {
          r.code = bind_code::taken;
          return r;
        }
        i->second.session = b.session;
        auto elapsed =
            std::chrono::duration_cast<ms>(self->clock().now() - i->second.started).count();
        r.code = bind_code::bound;
        r.shards = i->second.shards;
        r.remaining_ms =
            elapsed >= st.cfg.budget_ms ? 1 : st.cfg.budget_ms - static_cast<uint32_t>(elapsed);
        r.endpoint_index = static_cast<int32_t>(st.index);
        r.endpoint = caf::actor_cast<invocation_actor>(self);
        return r;
      },
      [=](invocation_leased& l) {
        auto i = self->state.invocations.find(l.invocation);
        if (i != self->state.invocations.end() && l.shards > 0) i->second.leased = true;
      },
      [=](shard_reported& r) {
        self->state.m.steps += r.steps;
        self->state.m.open_us_total += r.open_us;
        self->state.m.opens++;
      },
      [=](http_result& out) {
        auto& st = self->state;
        auto id = out.id;
        auto status = out.status;
        auto timed_out = out.timed_out;
        auto total_ms = out.total_ms;
        auto& error = out.error;
        auto i = st.invocations.find(id);
        if (i == st.invocations.end()) return;
        auto inv = i->second;
        if (out.sent && !out.stopping) {  // a POST never sent (or cut) says nothing of its latency
          st.m.total_ms += static_cast<uint64_t>(total_ms);
          st.m.max_ms = std::max(st.m.max_ms, static_cast<uint64_t>(total_ms));
          st.m.duration.observe(static_cast<double>(total_ms) / 1000.0);
        }
        bool ok = status >= 200 && status < 300;
        bool success = ok && inv.leased;
        bool preempted = ok && !inv.leased && inv.session != 0;
        if (spdlog::should_log(spdlog::level::debug))
          spdlog::debug("invocation ended endpoint={} invocation={} status={} ms={:.1f} leased={}",
                        st.index, proto::format_invocation_id(proto::invocation_id{id}), status,
                        total_ms, inv.leased);
        if (out.stopping) {
          // This node's stop ended it: nothing the endpoint did, counted nowhere.
        } else if (success) {
          st.m.succeeded++;
        } else if (preempted) {
          st.m.preempted++;
        } else if (ok) {
          st.m.unleased++;
        } else if (timed_out) {
          st.m.timed_out++;
        } else {
          st.m.failed++;
        }
        // A worker that leased its shards and then did not answer in time was reached: the
        // endpoint is up, and its shards back off on their own (a crash each). It is what a step
        // longer than the budget does, so it is said as that, not as the endpoint's failure.
        bool leased_timed_out = timed_out && inv.leased && !ok && !out.stopping;
        if (leased_timed_out) {
          set_last_error(self, "its worker leased the shards and did not answer within " +
                                   answer_deadline_text(st) +
                                   ": a step may take longer than the budget (budget_ms " +
                                   std::to_string(st.cfg.budget_ms) + ")");
          st.failures = 0;  // it was reached: as after a success, a backoff it had is over
          st.not_before = {};
          logging::warn_limited(
              "invocation timed out after its lease",
              fmt::format("endpoint invocation timed out after its worker leased the shards: a "
                          "step may take longer than the budget endpoint={} url={} invocation={} "
                          "shards={} error={}",
                          st.index, logging::display_url(st.cfg.url),
                          proto::format_invocation_id(proto::invocation_id{id}), inv.shards.size(),
                          logging::quoted(st.m.last_error)));
        } else if (!success && !preempted && !out.stopping &&
                   rules::counts_in_a_row(st.failures, inv.started, st.last_counted)) {
          st.failures++;
          st.m.backoffs++;
          st.last_counted = self->clock().now();
          auto d = rules::backoff(st.failures, rules::failure_base, rules::failure_cap, st.rng());
          st.not_before = self->clock().now() + d;
          set_last_error(self,
                         ok ? "answered " + std::to_string(status) + " but never leased its shards"
                         : timed_out ? "no answer within " + answer_deadline_text(st)
                         : status != 0
                             ? "answered HTTP " + std::to_string(status) + answer_excerpt(out.body)
                             : error);
          auto now = self->clock().now();
          if (now - st.logged >= std::chrono::seconds(10)) {  // at most every 10 s
            st.logged = now;
            spdlog::warn("endpoint failed endpoint={} url={} failures_in_a_row={} backoff_ms={} "
                         "invocation={} error={}",
                         st.index, logging::display_url(st.cfg.url), st.failures,
                         std::chrono::duration_cast<ms>(d).count(),
                         proto::format_invocation_id(proto::invocation_id{id}),
                         logging::quoted(st.m.last_error));
          }
        } else if (success) {  // the endpoint answers: whatever was sent when, it is up
          st.failures = 0;
          st.not_before = {};
          tell_trouble(self, "");
        }
        // Fencing: after a 2xx the worker gets close_grace_ms to leave by itself; otherwise now.
        if (inv.session != 0) {
          if (ok)
            self->delayed_send(self, ms{st.close_grace_ms}, fencelater_atom::value, inv.session);
          else
            self->send(st.directory, fence_request{inv.session, leased_timed_out});
        }
        st.invocations.erase(i);
        auto wait =
            st.not_before > self->clock().now()
                ? static_cast<uint64_t>(
                      std::chrono::duration_cast<ms>(st.not_before - self->clock().now()).count())
                : 0;
        // The node stops: its shards are not sent again at once (the scheduler exits first
        // today; this keeps a changed shutdown order from looping through here).
        if (out.stopping)
          wait = std::max<uint64_t>(wait, static_cast<uint64_t>(rules::failure_base.count()));
        self->send(st.scheduler, invocation_ended{st.index, id, inv.shards, success, wait});
      },
      [=](fencelater_atom, uint64_t session) {
        self->send(self->state.directory, fence_request{session});
      },
      [=](metrics_atom) -> std::string { return endpoint_json(self->state, self->clock().now()); },
      [=](stats_atom) { return stats_of(self); },
  };
}

/// The endpoint's stats (docs/operations.md, "endpoint").
actor_stats stats_of(endpoint_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  actor_stats a{"endpoint", st.index};
  a.state = st.not_before > now                           ? "backoff"
            : st.failures > 0                             ? "failing"
            : st.invocations.size() >= st.cfg.concurrency ? "full"
                                                          : "ok";
  a.mailbox = self->mailbox().size();
  a.text("url", logging::display_url(st.cfg.url));
  std::string types;
  for (auto& t : st.cfg.types)
    types += (types.empty() ? "" : ",") + t;
  a.text("types", types);
  a.num("inFlight", st.invocations.size());
  a.num("concurrency", st.cfg.concurrency);
  a.num("failuresInARow", st.failures);
  a.num("backoffMs",
        st.not_before > now ? std::chrono::duration_cast<ms>(st.not_before - now).count() : 0);
  a.num("invocations", st.m.invocations);
  a.num("succeeded", st.m.succeeded);
  a.num("failed", st.m.failed);
  a.num("timedOut", st.m.timed_out);
  a.num("unleased", st.m.unleased);
  a.num("preempted", st.m.preempted);
  a.num("backoffs", st.m.backoffs);
  a.num("steps", st.m.steps);
  a.text("lastError", st.m.last_error);
  a.num("lastErrorAtMs", static_cast<uint64_t>(st.m.last_error_ms));
  a.histograms.push_back(st.m.duration);
  return a;
}

}  // namespace

endpoint_actor spawn_endpoint(caf::actor_system& sys, uint32_t index, endpoint_settings cfg,
                              std::string server_address, uint32_t close_grace_ms,
                              http_sender* http, scheduler_actor scheduler, fence_actor directory) {
  return sys.spawn(endpoint_fn, index, std::move(cfg), std::move(server_address), close_grace_ms,
                   http, std::move(scheduler), std::move(directory));
}

}  // namespace fusee::server
