// The scheduler: an index of ready shards per endpoint, fed by the wake records' status messages,
// drained into invocations within each endpoint's free slots. A dispatch costs O(ready shards).
#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <optional>
#include <queue>
#include <random>
#include <sstream>
#include <unordered_map>

#include "actors/cluster/shard_owners.hpp"
#include "actors/endpoint.hpp"
#include "actors/http_client.hpp"
#include "actors/inspect/shard_state.hpp"
#include "actors/invoker.hpp"
#include "actors/invoker_rules.hpp"
#include "actors/shard.hpp"
#include "actors/wake_records.hpp"
#include "logging/logging.hpp"
#include "protocol/ids.hpp"
#include "protocol/invocation_request.hpp"

namespace fusee::server {

namespace {

using time_point = caf::actor_clock::time_point;
using ms = std::chrono::milliseconds;

/// The scheduler's view of one shard: 32 bytes, as its wake record last reported it, plus what
/// only the scheduler knows (the invocation it is in, which ready queue holds it, its timer).
struct shard_entry {
  uint64_t invocation = 0;  ///< while invoking (introspection)
  int64_t ready_at = 0;     ///< waiting, backoff: when it becomes ready (clock ns)
  uint32_t timer = 0;       ///< generation of its live entry in the timer heap
  int16_t endpoint = -1;    ///< chosen endpoint (when ready)
  int16_t queued_in = -1;   ///< the ready queue with a live entry for it, -1 = none
  uint8_t state = shard_status::idle;
  uint8_t reasons = 0;
  bool invoking = false;
  bool withheld = false;  ///< invoked for by nobody for now (cluster: withheld.hpp)
};

/// A shard's due time in the timer heap; stale once the shard's `timer` generation moved on.
struct due_entry {
  int64_t at;
  uint32_t shard;
  uint32_t timer;
  bool operator>(const due_entry& o) const { return at > o.at; }
};

struct endpoint_slot {
  endpoint_actor actor;
  endpoint_settings cfg;
  uint32_t in_flight = 0;
  time_point not_before{};
  std::deque<uint32_t> ready;  ///< shard ids; entries whose queued_in differs are stale
  /// A shard was queued for a call since the last probe looked (rules::may_probe): only then
  /// does a backing-off endpoint's queue get read for one.
  bool call_queued = false;
  uint64_t probe = 0;          ///< the invocation sent to it while it backs off, 0 = none
  time_point last_activity{};  ///< its last invocation sent or ended
};

/// What the stats count a shard as: its state, or invoking (which overrides it).
enum shard_count : uint8_t {
  count_idle,
  count_waiting,
  count_backoff,
  count_ready,
  count_invoking
};
shard_count counted_as(const shard_entry& x) {
  return x.invoking ? count_invoking : static_cast<shard_count>(x.state);
}

/// What the inspector sees of a shard.
shard_invoker_view view_of(const shard_entry& x) {
  return shard_invoker_view{x.state, x.reasons, x.endpoint, x.invocation};
}

struct scheduler_state {
  std::vector<shard_entry> shards;
  /// Shards per shard_count, kept as they change (change()): a stats request at a million shards
  /// reads five numbers, not every shard.
  std::array<uint64_t, 5> counts{};
  bool started = false;  ///< the directory knows the invoker: dispatching may begin
  /// Why dispatching stopped for good (the log failed: no grant can be made until restart);
  /// none while it runs. Shards still become due and are counted; none is invoked.
  std::optional<std::string> halted;
  std::vector<endpoint_slot> endpoints;
  std::unordered_map<uint64_t, uint32_t> owner;  ///< invocation -> endpoint index
  uint64_t handbacks = 0, crashes = 0, no_progress = 0;
  uint64_t withheld = 0;         ///< shards withheld now
  bool dispatch_queued = false;  ///< a coalesced dispatch is in the mailbox
  bool gathering = false;        ///< a gather window is open (its timer is pending)
  rules::earliest_timer timer;   ///< the next due time or end of an endpoint backoff (ticks >= 1)
  /// Waiting and backing-off shards by due time (the wake records arm no timers of their own).
  std::priority_queue<due_entry, std::vector<due_entry>, std::greater<>> due;
  static inline const char* name = "scheduler";
};

using scheduler_ptr = scheduler_actor::stateful_pointer<scheduler_state>;

/// Every change of a shard's state or `invoking` goes through here, so `counts` stays true.
template <class F>
void change(scheduler_state& st, shard_entry& x, F&& f) {
  st.counts[counted_as(x)]--;
  f();
  st.counts[counted_as(x)]++;
}

void arm(scheduler_ptr self, time_point at) {
  if (auto g = self->state.timer.arm(at))
    self->delayed_send(self, std::max<caf::timespan>(at - self->clock().now(), caf::timespan{0}),
                       tick_atom::value, g);
}

void enqueue(scheduler_ptr self, uint32_t shard);

/// Arms the timer for the earliest due time in the heap.
void arm_due(scheduler_ptr self) {
  auto& st = self->state;
  if (!st.due.empty()) arm(self, clock_at(st.due.top().at));
}

/// Counts the shards whose due time has come ready (their records would say so now).
void wake_due(scheduler_ptr self) {
  auto& st = self->state;
  auto now = clock_ns(self->clock().now());
  while (!st.due.empty() && st.due.top().at <= now) {
    auto e = st.due.top();
    st.due.pop();
    auto& x = st.shards[e.shard];
    if (e.timer != x.timer ||
        (x.state != shard_status::waiting && x.state != shard_status::backoff))
      continue;  // stale: the record has said something since
    change(st, x, [&] { x.state = shard_status::ready; });
    enqueue(self, e.shard);
  }
  // Stale entries pile up only if shards change their due time often: rebuild then.
  if (st.due.size() > 2 * st.shards.size() + 1024) {
    decltype(st.due) fresh;
    for (uint32_t s = 0; s < st.shards.size(); ++s)
      if (auto& x = st.shards[s];
          x.state == shard_status::waiting || x.state == shard_status::backoff)
        fresh.push(due_entry{x.ready_at, s, x.timer});
    st.due.swap(fresh);
  }
}

/// Dispatches once the messages already in the mailbox are in: a burst of ready shards or ended
/// invocations costs one dispatch, not one per message.
void request_dispatch(scheduler_ptr self) {
  auto& st = self->state;
  if (st.dispatch_queued) return;
  st.dispatch_queued = true;
  self->send(self, tick_atom::value, uint64_t{0});
}

/// Dispatches when the gather window (rules::gather_window) closes.
void request_gather(scheduler_ptr self) {
  auto& st = self->state;
  if (st.gathering) return;
  st.gathering = true;
  self->delayed_send(self, rules::gather_window, gather_atom::value);
}

/// Whether shard `x`, met in endpoint `e`'s queue, may go in an invocation of `e` now.
bool sendable(const shard_entry& x, size_t e) {
  return x.state == shard_status::ready && !x.invoking && !x.withheld &&
         x.endpoint == static_cast<int16_t>(e);
}

/// Puts a ready shard that is not in an invocation into its endpoint's queue (once); a call or a
/// message dispatches at once, anything else after the gather window.
void enqueue(scheduler_ptr self, uint32_t shard) {
  auto& st = self->state;
  auto& x = st.shards[shard];
  if (x.state != shard_status::ready || x.invoking || x.withheld) return;
  if (x.endpoint < 0 || static_cast<size_t>(x.endpoint) >= st.endpoints.size()) return;
  auto& ep = st.endpoints[x.endpoint];
  bool call = x.reasons & proto::reason_call;
  if (call) ep.call_queued = true;
  if (x.queued_in == x.endpoint) {  // queued already: a call it now waits for may probe
    if (call && ep.not_before > self->clock().now()) request_dispatch(self);
    return;
  }
  x.queued_in = x.endpoint;
  ep.ready.push_back(shard);
  if (x.reasons & (proto::reason_call | proto::reason_message))
    request_dispatch(self);
  else
    request_gather(self);
}

/// Sends invocation `id` of endpoint `e` for `group`.
void send_invocation(scheduler_ptr self, size_t e, uint64_t id,
                     const std::vector<uint32_t>& group) {
  auto& st = self->state;
  auto& ep = st.endpoints[e];
  uint8_t reasons = 0;
  for (auto s : group) {
    auto& x = st.shards[s];
    reasons |= x.reasons;
    change(st, x, [&] { x.invoking = true; });
    x.invocation = id;
  }
  st.owner[id] = static_cast<uint32_t>(e);
  ep.in_flight++;
  ep.last_activity = self->clock().now();
  self->send(ep.actor, invoke_atom::value, id, group, reasons);
}

/// Endpoint `e` backs off: the shards calls wait for (at most max_shards of them) go in one
/// invocation if rules::may_probe allows; the rest wait for the backoff's end. The queue is
/// read whole and kept without its stale entries and the shards sent, so probes that fail (and
/// keep the backoff going) do not grow it.
void probe(scheduler_ptr self, size_t e, time_point now) {
  auto& st = self->state;
  auto& ep = st.endpoints[e];
  if (!rules::may_probe(ep.call_queued, ep.probe != 0, ep.last_activity, now)) {
    if (ep.call_queued && ep.probe == 0) arm(self, ep.last_activity + rules::probe_every);
    return;
  }
  ep.call_queued = false;
  std::vector<uint32_t> calls;
  std::deque<uint32_t> kept;
  for (auto s : ep.ready) {
    auto& x = st.shards[s];
    if (x.queued_in != static_cast<int16_t>(e)) continue;  // stale
    if (calls.size() < ep.cfg.max_shards && (x.reasons & proto::reason_call) && sendable(x, e)) {
      x.queued_in = -1;  // (a second entry for it is skipped)
      calls.push_back(s);
    } else {
      kept.push_back(s);
    }
  }
  ep.ready.swap(kept);
  if (calls.empty()) return;
  ep.probe = proto::random_invocation_id().value();
  send_invocation(self, e, ep.probe, calls);
}

/// Groups each endpoint's ready shards into invocations, as many as its free slots allow.
void dispatch(scheduler_ptr self) {
  auto& st = self->state;
  if (st.halted) return;
  auto now = self->clock().now();
  for (size_t e = 0; e < st.endpoints.size(); ++e) {
    auto& ep = st.endpoints[e];
    if (ep.ready.empty() || ep.in_flight >= ep.cfg.concurrency) continue;
    if (ep.not_before > now) {
      probe(self, e, now);
      arm(self, ep.not_before);
      continue;
    }
    uint32_t free = ep.cfg.concurrency - ep.in_flight;
    size_t cap = size_t{free} * ep.cfg.max_shards;
    std::vector<uint32_t> picked;
    while (!ep.ready.empty() && picked.size() < cap) {
      auto s = ep.ready.front();
      ep.ready.pop_front();
      auto& x = st.shards[s];
      if (x.queued_in != static_cast<int16_t>(e)) continue;  // stale entry
      x.queued_in = -1;
      if (sendable(x, e)) picked.push_back(s);
    }
    for (auto& group : rules::group(picked, free, ep.cfg.max_shards))
      send_invocation(self, e, proto::random_invocation_id().value(), group);
  }
}

std::string metrics_json(const scheduler_state& st, const std::vector<std::string>& endpoints,
                         uint64_t parked_calls) {
  auto due = st.counts[count_ready], invoking = st.counts[count_invoking],
       backing = st.counts[count_backoff];
  std::ostringstream o;
  o << "{\"endpoints\":[";
  for (size_t i = 0; i < endpoints.size(); ++i)
    o << (i ? "," : "") << endpoints[i];
  o << "],\"dueShards\":" << due << ",\"invokingShards\":" << invoking
    << ",\"backoffShards\":" << backing << ",\"handbacks\":" << st.handbacks
    << ",\"crashes\":" << st.crashes << ",\"noProgress\":" << st.no_progress
    << ",\"parkedCalls\":" << parked_calls << ",\"halted\":" << (st.halted ? "true" : "false")
    << "}";
  return o.str();
}

/// The scheduler's stats (docs/operations.md, "scheduler").
actor_stats stats_of(scheduler_ptr self) {
  auto& st = self->state;
  actor_stats a{"scheduler", 0};
  auto ready = st.counts[count_ready], waiting = st.counts[count_waiting],
       backoff = st.counts[count_backoff], invoking = st.counts[count_invoking];
  uint64_t queued = 0;
  for (auto& ep : st.endpoints)
    queued += ep.ready.size();
  a.state = st.halted ? "halted" : st.started ? "running" : "starting";
  a.mailbox = self->mailbox().size();
  a.num("dueShards", ready);
  a.num("waitingShards", waiting);
  a.num("backoffShards", backoff);
  a.num("invokingShards", invoking);
  a.num("invocationsInFlight", st.owner.size());
  a.num("readyQueueEntries", queued);
  a.num("handbacks", st.handbacks);
  a.num("crashes", st.crashes);
  a.num("noProgress", st.no_progress);
  a.num("withheldShards", st.withheld);
  if (st.halted) a.text("haltedBecause", *st.halted);
  return a;
}

scheduler_actor::behavior_type scheduler_fn(scheduler_ptr self, node_settings cfg,
                                            std::string server_address,
                                            std::shared_ptr<const endpoint_types> types,
                                            http_sender* http, fence_actor directory,
                                            std::shared_ptr<wake_records> records) {
  auto& st = self->state;
  for (uint32_t i = 0; i < cfg.endpoints.size(); ++i) {
    auto a = spawn_endpoint(self->system(), i, cfg.endpoints[i], server_address, cfg.close_grace_ms,
                            http, self, directory);
    self->link_to(a);
    st.endpoints.push_back(endpoint_slot{a, cfg.endpoints[i], 0, {}, {}});
    // Never 0 from here: every invocation fits its IDLE in one frame.
    st.endpoints.back().cfg.max_shards =
        rules::invocation_shards(cfg.endpoints[i].max_shards, cfg.max_frame_mb);
  }
  // Every shard is due once at start (`recovery`), as its wake record is at spawn; nothing is
  // dispatched before the directory says it knows the invoker (put_atom: so it does before any
  // invoked worker says HELLO). The put names the shards held already, idle from then on; their
  // records hear so too, and report idle.
  st.shards.resize(cfg.shards);
  st.counts[count_idle] = cfg.shards;
  // The wake records are not linked (100,000 links would cost more than the records); they end
  // with the scheduler.
  self->attach_functor([records](const caf::error&) { records->shut_down(); });
  shard_owners owners(cfg);  // another node's shards never become due here
  for (uint32_t s = 0; s < cfg.shards; ++s) {
    auto init = initial_status(s, *types, owners.mine(s));
    auto& x = st.shards[s];
    change(st, x, [&] { x.state = init.state; });
    x.reasons = init.reasons;
    x.endpoint = init.endpoint;
  }
  return {
      [=](caf::put_atom, const std::vector<uint32_t>& held) {
        auto& st = self->state;
        if (st.started) return;  // once
        st.started = true;
        for (auto s : held)  // idle, as their records will report (never due while held)
          if (s < st.shards.size()) {
            auto& x = st.shards[s];
            change(st, x, [&] { x.state = shard_status::idle; });
            x.reasons = 0;
          }
        for (uint32_t s = 0; s < self->state.shards.size(); ++s)
          enqueue(self, s);
      },
      [=](halt_atom, const std::string& why) {
        auto& st = self->state;
        if (st.halted) return;  // once
        st.halted = why;
        // (Invocations in flight end as their POSTs do; their workers get empty LEASEs.)
        spdlog::error("the invoker sends no invocation until restart reason={} "
                      "invocations_in_flight={}",
                      logging::quoted(why), st.owner.size());
      },
      [=](const withheld_shards& w) {
        // What the directory withholds: no invocation for it; what it gives back is enqueued
        // again if it is ready (invocations already out end as they would).
        auto& st = self->state;
        auto next = withheld_bits(w, st.shards.size());
        st.withheld = 0;
        bool given_back = false;
        for (uint32_t s = 0; s < st.shards.size(); ++s) {
          st.withheld += next[s];
          if (st.shards[s].withheld == next[s]) continue;
          st.shards[s].withheld = next[s];
          if (!next[s]) {
            enqueue(self, s);
            given_back = true;
          }
        }
        if (given_back) request_dispatch(self);
      },
      [=](const shard_status& s) {
        auto& st = self->state;
        if (s.shard >= st.shards.size()) return;
        switch (s.event) {
        case shard_status::handback:
          st.handbacks++;
          break;
        case shard_status::crash:
          st.crashes++;
          break;
        case shard_status::no_progress:
          st.handbacks++;
          st.no_progress++;
          break;
        case shard_status::stalled:
          st.crashes++;
          st.no_progress++;
          break;
        default:
          break;
        }
        auto& x = st.shards[s.shard];
        bool timed = s.state == shard_status::waiting || s.state == shard_status::backoff;
        bool same_timer = timed && x.state == s.state && x.ready_at == s.ready_at;
        change(st, x, [&] { x.state = s.state; });
        x.reasons = s.reasons;
        x.endpoint = s.endpoint;
        if (!same_timer) {
          x.timer++;  // any entry it had in the heap is stale now
          if (timed) {
            x.ready_at = s.ready_at;
            st.due.push(due_entry{s.ready_at, s.shard, x.timer});
            arm(self, clock_at(s.ready_at));
          }
        }
        enqueue(self, s.shard);
      },
      [=](bind_request& b) -> caf::result<bind_result> {
        // The endpoint that owns the invocation answers (with its handle, so the directory tells
        // it of the lease and the reports directly).
        auto& st = self->state;
        auto i = st.owner.find(b.invocation);
        if (i == st.owner.end()) return bind_result{};  // unknown, or already over
        return self->delegate(st.endpoints[i->second].actor, b);
      },
      [=](const invocation_ended& end) {
        auto& st = self->state;
        st.owner.erase(end.invocation);
        auto& ep = st.endpoints[end.endpoint];
        ep.in_flight--;
        if (ep.probe == end.invocation) ep.probe = 0;
        ep.last_activity = self->clock().now();
        ep.not_before = self->clock().now() + ms{static_cast<int64_t>(end.backoff_ms)};
        for (auto s : end.shards) {
          auto& x = st.shards[s];
          change(st, x, [&] { x.invoking = false; });
          x.invocation = 0;
          enqueue(self, s);  // if still ready (never leased, and still due): queued again
        }
        request_dispatch(self);  // a slot came free
      },
      [=](tick_atom, uint64_t generation) {
        auto& st = self->state;
        if (generation == 0) {
          st.dispatch_queued = false;
        } else {
          if (!st.timer.fire(generation)) return;  // a stale tick
          wake_due(self);
          // Shards woken by their due time wait for the gather window, as any due for a timer
          // does (a spread of timers shares invocations); its end dispatches everything.
          if (st.gathering) {
            arm_due(self);
            return;
          }
        }
        dispatch(self);
        arm_due(self);
      },
      [=](gather_atom) {
        self->state.gathering = false;
        dispatch(self);
      },
      [=](metrics_atom, uint64_t parked_calls) -> caf::typed_response_promise<std::string> {
        auto rp = self->make_response_promise<std::string>();
        auto& st = self->state;
        auto collected = std::make_shared<std::vector<std::string>>(st.endpoints.size());
        auto left = std::make_shared<size_t>(st.endpoints.size());
        if (*left == 0) {
          rp.deliver(metrics_json(st, {}, parked_calls));
          return rp;
        }
        for (size_t i = 0; i < st.endpoints.size(); ++i)
          self->request(st.endpoints[i].actor, std::chrono::seconds(5), metrics_atom::value)
              .then(
                  [=](std::string& j) mutable {
                    (*collected)[i] = std::move(j);
                    if (--*left == 0)
                      rp.deliver(metrics_json(self->state, *collected, parked_calls));
                  },
                  [=](caf::error&) mutable {
                    if (--*left == 0)
                      rp.deliver(metrics_json(self->state, *collected, parked_calls));
                  });
        return rp;
      },
      [=](stats_atom) { return stats_of(self); },
      [=](endpoints_atom) {
        std::vector<endpoint_actor> out;
        for (auto& ep : self->state.endpoints)
          out.push_back(ep.actor);
        return out;
      },
      [=](view_atom, uint32_t from, uint32_t to) {
        auto& st = self->state;
        std::string out;
        if (!clamp_range(st.shards.size(), from, to)) return out;
        out.resize(to - from + 1);
        for (uint32_t s = from; s <= to; ++s)
          out[s - from] = static_cast<char>(invoker_mark_of(view_of(st.shards[s])));
        return out;
      },
      [=](const shard_details_request& req) {
        auto& st = self->state;
        std::vector<shard_invoker_view> out;
        for (auto s : req.shards)
          out.push_back(s < st.shards.size() ? view_of(st.shards[s]) : shard_invoker_view{});
        return out;
      },
  };
}

}  // namespace

invoker_handles spawn_invoker(caf::actor_system& sys, const node_settings& settings,
                              std::string server_address, http_sender* http,
                              fence_actor directory) {
  auto types = std::make_shared<endpoint_types>();
  for (auto& e : settings.endpoints)
    types->push_back(e.types);
  invoker_handles h;
  // The records are spawned at their first message (wake_records.hpp); the spawner needs the
  // scheduler, which needs the registry: the registry gets the scheduler's handle once it runs.
  auto scheduler = std::make_shared<scheduler_actor>();
  auto owners = std::make_shared<const shard_owners>(settings);
  uint64_t seed = std::random_device{}();
  h.records = std::make_shared<wake_records>(
      settings.shards,
      [&sys, scheduler, types, seed, owners](uint32_t shard, const resting_record& rest) {
        return spawn_shard(sys, shard, *scheduler, types, seed, owners->mine(shard), rest);
      },
      [types, owners](uint32_t shard, const resting_record& rest,
                      caf::actor_clock::time_point now) {
        return resting_shard_stats(shard, *types, owners->mine(shard), rest, now);
      });
  h.scheduler = sys.spawn(scheduler_fn, settings, std::move(server_address), types, http,
                          std::move(directory), h.records);
  *scheduler = h.scheduler;
  return h;
}

}  // namespace fusee::server
