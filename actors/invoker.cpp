#include "actors/invoker.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <sstream>
#include <unordered_map>

#include "actors/atoms.hpp"
#include "actors/http_client.hpp"
#include "actors/invoker_rules.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/json_text.hpp"
#include "protocol/messages.hpp"
#include "protocol/signature.hpp"

namespace fusee::server {

namespace {

using clock_type = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

uint64_t unix_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count());
}

using rules::backoff;

using proto::json_quote;

// -- endpoint -------------------------------------------------------------------------------

struct endpoint_metrics {
  uint64_t invocations = 0, succeeded = 0, failed = 0, timed_out = 0, unleased = 0;
  uint64_t total_ms = 0, max_ms = 0, shards = 0, steps = 0, open_us_total = 0, opens = 0;
  std::string last_error;
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
  caf::actor scheduler, directory;
  std::unordered_map<uint64_t, invocation> invocations;
  uint32_t failures = 0;
  clock_type::time_point not_before{};
  clock_type::time_point logged{};
  endpoint_metrics m;
  std::mt19937_64 rng{std::random_device{}()};
  static inline const char* name = "endpoint";
};

using endpoint_ptr = caf::stateful_actor<endpoint_state>*;

std::string endpoint_json(const endpoint_state& st, clock_type::time_point now) {
  std::ostringstream o;
  long backoff_ms =
      st.not_before > now ? std::chrono::duration_cast<ms>(st.not_before - now).count() : 0;
  o << "{\"url\":" << json_quote(st.cfg.url) << ",\"types\":[";
  for (size_t i = 0; i < st.cfg.types.size(); ++i)
    o << (i ? "," : "") << json_quote(st.cfg.types[i]);
  o << "],\"invocations\":" << st.m.invocations << ",\"succeeded\":" << st.m.succeeded
    << ",\"failed\":" << st.m.failed << ",\"timedOut\":" << st.m.timed_out
    << ",\"unleased\":" << st.m.unleased << ",\"inFlight\":" << st.invocations.size()
    << ",\"failuresInARow\":" << st.failures << ",\"backoffMs\":" << backoff_ms
    << ",\"totalMs\":" << st.m.total_ms << ",\"maxMs\":" << st.m.max_ms
    << ",\"shards\":" << st.m.shards << ",\"steps\":" << st.m.steps
    << ",\"openUsTotal\":" << st.m.open_us_total << ",\"opens\":" << st.m.opens
    << ",\"lastError\":" << (st.m.last_error.empty() ? "null" : json_quote(st.m.last_error)) << "}";
  return o.str();
}

caf::behavior endpoint_fn(endpoint_ptr self, uint32_t index, endpoint_settings cfg,
                          std::string server_address, uint32_t close_grace_ms, http_sender* http,
                          caf::actor scheduler, caf::actor directory) {
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
                                proto::sign(st.cfg.secret, unix_ms(), req.body));
        req.timeout_ms = st.cfg.budget_ms + st.cfg.grace_ms;
        req.ca_file = st.cfg.ca_file;
        req.cert_file = st.cfg.cert_file;
        req.key_file = st.cfg.key_file;
        st.invocations[id] = invocation{shards, 0, false, self->clock().now()};
        st.m.invocations++;
        st.m.shards += shards.size();
        st.http->submit(std::move(req));
      },
      [=](bind_atom, uint64_t id,
          uint64_t session) -> caf::result<uint32_t, std::vector<uint32_t>, uint32_t> {
        auto& st = self->state;
        auto i = st.invocations.find(id);
        if (i == st.invocations.end())
          return caf::make_result(uint32_t{7}, std::vector<uint32_t>{}, uint32_t{0});
        if (i->second.session != 0)
          return caf::make_result(uint32_t{8}, std::vector<uint32_t>{}, uint32_t{0});
        i->second.session = session;
        auto elapsed =
            std::chrono::duration_cast<ms>(self->clock().now() - i->second.started).count();
        uint32_t left =
            elapsed >= st.cfg.budget_ms ? 1 : st.cfg.budget_ms - static_cast<uint32_t>(elapsed);
        return caf::make_result(uint32_t{0}, i->second.shards, left);
      },
      [=](leased_atom, uint64_t id, uint32_t granted) {
        auto i = self->state.invocations.find(id);
        if (i != self->state.invocations.end() && granted > 0) i->second.leased = true;
      },
      [=](report_atom, uint64_t steps, uint64_t open_us) {
        self->state.m.steps += steps;
        self->state.m.open_us_total += open_us;
        self->state.m.opens++;
      },
      [=](httpdone_atom, uint64_t id, long status, std::string& error, bool timed_out,
          double total_ms) {
        auto& st = self->state;
        auto i = st.invocations.find(id);
        if (i == st.invocations.end()) return;
        auto inv = i->second;
        st.m.total_ms += static_cast<uint64_t>(total_ms);
        st.m.max_ms = std::max(st.m.max_ms, static_cast<uint64_t>(total_ms));
        bool ok = status >= 200 && status < 300;
        bool success = ok && inv.leased;
        if (success)
          st.m.succeeded++;
        else if (ok)
          st.m.unleased++;
        else if (timed_out)
          st.m.timed_out++;
        else
          st.m.failed++;
        if (!success) {
          st.failures++;
          auto d = backoff(st.failures, rules::failure_base, rules::failure_cap, st.rng);
          st.not_before = self->clock().now() + d;
          st.m.last_error =
              ok          ? "answered " + std::to_string(status) + " but never leased its shards"
              : timed_out ? "no answer within budget + grace (" +
                                std::to_string(st.cfg.budget_ms + st.cfg.grace_ms) + " ms)"
              : status != 0 ? "answered HTTP " + std::to_string(status)
                            : error;
          auto now = self->clock().now();
          if (now - st.logged >= std::chrono::seconds(10)) {  // at most every 10 s
            st.logged = now;
            std::fprintf(stderr, "fusee server: endpoint %s failed %u time(s) in a row: %s\n",
                         st.cfg.url.c_str(), st.failures, st.m.last_error.c_str());
          }
        } else {
          st.failures = 0;
          st.not_before = {};
        }
        // Fencing: after a 2xx the worker gets close_grace_ms to leave by itself; otherwise now.
        if (inv.session != 0) {
          if (ok)
            self->delayed_send(self, ms{st.close_grace_ms}, fencelater_atom::value, inv.session);
          else
            self->send(st.directory, fence_atom::value, inv.session);
        }
        st.invocations.erase(i);
        auto wait =
            st.not_before > self->clock().now()
                ? static_cast<uint64_t>(
                      std::chrono::duration_cast<ms>(st.not_before - self->clock().now()).count())
                : 0;
        self->send(st.scheduler, ended_atom::value, st.index, id, inv.shards, success, wait);
      },
      [=](fencelater_atom, uint64_t session) {
        self->send(self->state.directory, fence_atom::value, session);
      },
      [=](metrics_atom) { return endpoint_json(self->state, self->clock().now()); },
  };
}

// -- scheduler --------------------------------------------------------------------------------

struct wake {
  bool due = false;
  clock_type::time_point due_at{};
  uint8_t reasons = 0;
  std::vector<std::string> starts;    ///< types of waiting starts
  std::vector<std::string> awaiting;  ///< types the last holder had no code for
  int last_endpoint = -1;
  uint64_t invoking = 0;  ///< invocation id in flight, 0 = none
  uint32_t failures = 0;
  clock_type::time_point not_before{};
};

struct endpoint_slot {
  caf::actor actor;
  endpoint_settings cfg;
  uint32_t in_flight = 0;
  clock_type::time_point not_before{};
};

struct scheduler_state {
  invoker_settings cfg;
  std::vector<wake> shards;
  std::vector<endpoint_slot> endpoints;
  std::unordered_map<uint64_t, uint32_t> owner;  ///< invocation -> endpoint index
  uint64_t handbacks = 0, crashes = 0, no_progress = 0;
  uint64_t generation = 0;
  bool dispatch_queued = false;  ///< a dispatch message is in the mailbox (coalesces due shards)
  clock_type::time_point armed_for{};
  bool armed = false;
  std::mt19937_64 rng{std::random_device{}()};
  static inline const char* name = "scheduler";
};

using scheduler_ptr = caf::stateful_actor<scheduler_state>*;

bool has_type(const endpoint_settings& e, const std::string& t) {
  return std::find(e.types.begin(), e.types.end(), t) != e.types.end();
}

int choose(const scheduler_state& st, const wake& w) {
  std::vector<std::vector<std::string>> types;
  for (auto& e : st.endpoints)
    types.push_back(e.cfg.types);
  return rules::choose_endpoint(types, w.starts, w.awaiting, w.last_endpoint);
}

void arm(scheduler_ptr self, clock_type::time_point at) {
  auto& st = self->state;
  if (st.armed && st.armed_for <= at) return;
  st.armed = true;
  st.armed_for = at;
  auto delay = std::max<clock_type::duration>(at - self->clock().now(), clock_type::duration{0});
  self->delayed_send(self, std::chrono::duration_cast<caf::timespan>(delay), caf::tick_atom::value,
                     ++st.generation);
}

/// Groups the shards that are due now into invocations, as many as free slots allow.
void dispatch(scheduler_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
  std::map<int, std::vector<uint32_t>> per_endpoint;
  std::optional<clock_type::time_point> next;
  for (uint32_t s = 0; s < st.shards.size(); ++s) {
    auto& w = st.shards[s];
    if (!w.due || w.invoking) continue;
    auto ready = std::max(w.due_at, w.not_before);
    if (ready > now) {
      next = next ? std::min(*next, ready) : ready;
      continue;
    }
    per_endpoint[choose(st, w)].push_back(s);
  }
  for (auto& [e, shards] : per_endpoint) {
    auto& ep = st.endpoints[e];
    if (ep.not_before > now) {
      next = next ? std::min(*next, ep.not_before) : ep.not_before;
      continue;
    }
    for (auto& group : rules::group(shards, ep.cfg.concurrency - ep.in_flight, ep.cfg.max_shards)) {
      uint64_t id = proto::random_invocation_id().value();
      uint8_t reasons = 0;
      for (auto s : group) {
        auto& w = st.shards[s];
        reasons |= w.reasons;
        w.invoking = id;
        w.last_endpoint = e;
      }
      st.owner[id] = static_cast<uint32_t>(e);
      ep.in_flight++;
      self->send(ep.actor, invoke_atom::value, id, group, reasons);
    }
  }
  if (next) arm(self, *next);
}

/// Dispatches once the messages already in the mailbox are in: a burst of due shards or ended
/// invocations costs one scan of the shards, not one per message.
void request_dispatch(scheduler_ptr self) {
  auto& st = self->state;
  if (st.dispatch_queued) return;
  st.dispatch_queued = true;
  self->send(self, caf::tick_atom::value, uint64_t{0});
}

std::string metrics_json(scheduler_state& st, const std::vector<std::string>& endpoints,
                         uint64_t parked_calls, clock_type::time_point now) {
  uint32_t due = 0, invoking = 0, backing = 0;
  for (auto& w : st.shards) {
    if (w.invoking)
      invoking++;
    else if (w.due && w.not_before > now)
      backing++;
    else if (w.due && w.due_at <= now)
      due++;
  }
  std::ostringstream o;
  o << "{\"endpoints\":[";
  for (size_t i = 0; i < endpoints.size(); ++i)
    o << (i ? "," : "") << endpoints[i];
  o << "],\"dueShards\":" << due << ",\"invokingShards\":" << invoking
    << ",\"backoffShards\":" << backing << ",\"handbacks\":" << st.handbacks
    << ",\"crashes\":" << st.crashes << ",\"noProgress\":" << st.no_progress
    << ",\"parkedCalls\":" << parked_calls << "}";
  return o.str();
}

caf::behavior scheduler_fn(scheduler_ptr self, invoker_settings cfg, http_sender* http,
                           caf::actor directory) {
  auto& st = self->state;
  st.cfg = cfg;
  st.shards.resize(cfg.shards);
  for (uint32_t i = 0; i < cfg.endpoints.size(); ++i) {
    auto a = self->spawn(endpoint_fn, i, cfg.endpoints[i], cfg.server_address, cfg.close_grace_ms,
                         http, caf::actor_cast<caf::actor>(self), directory);
    self->link_to(a);
    st.endpoints.push_back(endpoint_slot{a, cfg.endpoints[i], 0, {}});
  }
  return {
      [=](due_atom, uint32_t shard, uint8_t reasons, const std::string& start_type) {
        auto& st = self->state;
        if (shard >= st.shards.size()) return;
        auto& w = st.shards[shard];
        if (!w.due || w.due_at > self->clock().now()) w.due_at = self->clock().now();
        w.due = true;
        w.reasons |= reasons;
        if (!start_type.empty() &&
            std::find(w.starts.begin(), w.starts.end(), start_type) == w.starts.end())
          w.starts.push_back(start_type);
        // Shards that become due together (at start, say) share invocations.
        request_dispatch(self);
      },
      [=](due_atom, const std::vector<uint32_t>& shards, uint8_t reasons) {
        // Many shards due at once (every free shard at start): one dispatch for all of them.
        auto& st = self->state;
        auto now = self->clock().now();
        for (auto shard : shards) {
          if (shard >= st.shards.size()) continue;
          auto& w = st.shards[shard];
          w.due = true;
          w.due_at = now;
          w.reasons |= reasons;
        }
        request_dispatch(self);
      },
      [=](leased_atom, uint32_t shard) {
        auto& w = self->state.shards.at(shard);
        w.due = false;
        w.reasons = 0;
        w.starts.clear();
      },
      [=](report_atom, uint32_t shard, uint8_t flags, uint64_t due_in_ms, uint64_t steps,
          uint64_t open_us, std::vector<std::string>& types, bool crashed, bool invoked) {
        auto& st = self->state;
        auto& w = st.shards.at(shard);
        auto now = self->clock().now();
        if (invoked && w.last_endpoint >= 0 && !crashed)
          self->send(st.endpoints[w.last_endpoint].actor, report_atom::value, steps, open_us);
        if (crashed) {  // a crash, a revoked lease, or a worker that never reported
          st.crashes++;
          w.due = true;
          w.due_at = now;
          w.reasons |= proto::reason_recovery;
          if (invoked) {
            w.failures++;
            w.not_before =
                now + backoff(w.failures, rules::failure_base, rules::failure_cap, st.rng);
          }
        } else if (flags & proto::idle_busy) {
          st.handbacks++;
          w.due = true;
          w.due_at = now;
          w.reasons |= proto::reason_handback;
          if ((flags & proto::idle_expired) && steps == 0) {
            st.no_progress++;
            w.failures++;
            auto d = backoff(w.failures, rules::no_progress_base, rules::no_progress_cap, st.rng);
            w.not_before = now + d;
            std::fprintf(stderr,
                         "fusee server: shard %u reached its invocation budget without finishing a "
                         "step; a step may take longer than the budget (next try in %lld ms)\n",
                         shard, static_cast<long long>(d.count()));
          } else {
            w.failures = 0;
          }
        } else {
          w.failures = 0;
          w.awaiting = types;
          w.due = due_in_ms != proto::nothing_due;
          w.due_at = w.due
                         ? now + ms{static_cast<int64_t>(std::min<uint64_t>(due_in_ms, 1ull << 40))}
                         : now;
          w.reasons = w.due ? proto::reason_timer : 0;
          for (auto& t : types)
            for (size_t i = 0; i < st.endpoints.size(); ++i)
              if (static_cast<int>(i) != w.last_endpoint && has_type(st.endpoints[i].cfg, t)) {
                w.due = true;
                w.due_at = now;
                w.reasons |= proto::reason_code;
              }
        }
        request_dispatch(self);
      },
      [=](bind_atom, uint64_t id, uint64_t session) {
        auto& st = self->state;
        auto rp = self->make_response_promise();
        auto i = st.owner.find(id);
        if (i == st.owner.end()) {
          rp.deliver(uint32_t{7}, std::vector<uint32_t>{}, uint32_t{0});
          return rp;
        }
        self->request(st.endpoints[i->second].actor, std::chrono::seconds(5), bind_atom::value, id,
                      session)
            .then([=](uint32_t code, std::vector<uint32_t>& shards, uint32_t left) mutable {
              rp.deliver(code, std::move(shards), left);
            });
        return rp;
      },
      [=](leased_atom, uint64_t id, uint32_t granted) {
        auto& st = self->state;
        if (auto i = st.owner.find(id); i != st.owner.end())
          self->send(st.endpoints[i->second].actor, leased_atom::value, id, granted);
      },
      [=](httpdone_atom, uint64_t id, long status, std::string& error, bool timed_out, double ms_) {
        auto& st = self->state;
        if (auto i = st.owner.find(id); i != st.owner.end())
          self->send(st.endpoints[i->second].actor, httpdone_atom::value, id, status,
                     std::move(error), timed_out, ms_);
      },
      [=](ended_atom, uint32_t e, uint64_t id, const std::vector<uint32_t>& shards, bool success,
          uint64_t backoff_ms) {
        auto& st = self->state;
        st.owner.erase(id);
        auto& ep = st.endpoints[e];
        ep.in_flight--;
        ep.not_before = self->clock().now() + ms{static_cast<int64_t>(backoff_ms)};
        for (auto s : shards) {
          auto& w = st.shards[s];
          if (w.invoking == id) w.invoking = 0;
        }
        (void)success;
        request_dispatch(self);
      },
      [=](caf::tick_atom, uint64_t gen) {
        auto& st = self->state;
        if (gen == 0) {  // the coalesced dispatch
          st.dispatch_queued = false;
          dispatch(self);
          return;
        }
        if (gen != st.generation) return;
        st.armed = false;
        dispatch(self);
      },
      [=](metrics_atom, uint64_t parked_calls) -> caf::result<std::string> {
        auto rp = self->make_response_promise<std::string>();
        auto& st = self->state;
        auto collected = std::make_shared<std::vector<std::string>>(st.endpoints.size());
        auto left = std::make_shared<size_t>(st.endpoints.size());
        if (*left == 0) {
          rp.deliver(metrics_json(st, {}, parked_calls, self->clock().now()));
          return rp;
        }
        for (size_t i = 0; i < st.endpoints.size(); ++i)
          self->request(st.endpoints[i].actor, std::chrono::seconds(5), metrics_atom::value)
              .then([=](const std::string& j) mutable {
                (*collected)[i] = j;
                if (--*left == 0)
                  rp.deliver(
                      metrics_json(self->state, *collected, parked_calls, self->clock().now()));
              });
        return rp;
      },
  };
}

}  // namespace

caf::actor spawn_invoker(caf::actor_system& sys, invoker_settings cfg, http_sender* http,
                         caf::actor directory) {
  return sys.spawn(scheduler_fn, std::move(cfg), http, std::move(directory));
}

void deliver_http_result(const caf::actor& scheduler, uint64_t id, long status, std::string error,
                         bool timed_out, double total_ms) {
  caf::anon_send(scheduler, httpdone_atom::value, id, status, std::move(error), timed_out,
                 total_ms);
}

}  // namespace fusee::server
