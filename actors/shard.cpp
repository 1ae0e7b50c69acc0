#include "actors/shard.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "actors/invoker_rules.hpp"
#include "logging/logging.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

namespace {

using clock_type = caf::actor_clock::clock_type;
using time_point = caf::actor_clock::time_point;
using ms = std::chrono::milliseconds;

/// Kept small on purpose: 100,000 idle shards are 100,000 of these (target ≤ 2 KiB each,
/// actor included).
struct shard_state {
  uint32_t shard = 0;
  bool due = false;
  bool leased = false;
  uint8_t reasons = 0;
  int16_t last_endpoint = -1;  ///< where the last invocation went, -1 = never invoked
  uint32_t failures = 0;       ///< crashes or no-progress handbacks in a row
  time_point due_at{};
  time_point not_before{};            ///< backoff
  std::vector<std::string> starts;    ///< types of waiting starts
  std::vector<std::string> awaiting;  ///< types the last holder had no code for
  rules::splitmix64 rng{0};
  shard_status told;  ///< what the scheduler last heard
  scheduler_actor scheduler;
  std::shared_ptr<const endpoint_types> types;
  static inline const char* name = "shard";
};

using shard_ptr = shard_actor::stateful_pointer<shard_state>;

/// The record's state as the scheduler needs it, now.
shard_status status_of(const shard_state& st, time_point now) {
  shard_status s;
  s.shard = st.shard;
  if (st.due && !st.leased) {
    auto ready_at = std::max(st.due_at, st.not_before);
    s.reasons = st.reasons;
    s.endpoint = static_cast<int16_t>(
        rules::choose_endpoint(*st.types, st.starts, st.awaiting, st.last_endpoint));
    if (ready_at > now) {  // the scheduler counts it ready then
      s.state = st.not_before > now ? shard_status::backoff : shard_status::waiting;
      s.ready_at = clock_ns(ready_at);
    } else {
      s.state = shard_status::ready;
    }
  }
  return s;
}

/// Works out the record's state and tells the scheduler when it changed (or an event happened).
void update(shard_ptr self, uint8_t event = shard_status::no_event) {
  auto& st = self->state;
  auto s = status_of(st, self->clock().now());
  s.event = event;
  if (s == st.told && event == shard_status::no_event) return;
  st.told = s;
  st.told.event = shard_status::no_event;
  self->send(st.scheduler, s);
}

/// The record as it rests (wake_records.hpp), and back.
resting_record rest_of(const shard_state& st) {
  return resting_record{clock_ns(st.due_at), clock_ns(st.not_before),
                        st.failures,         st.last_endpoint,
                        st.reasons,          st.due,
                        st.leased,           true};
}
void restore(shard_state& st, const resting_record& r) {
  st.due_at = clock_at(r.due_at);
  st.not_before = clock_at(r.not_before);
  st.failures = r.failures;
  st.last_endpoint = r.last_endpoint;
  st.reasons = r.reasons;
  st.due = r.due;
  st.leased = r.leased;
}

void become_due(shard_state& st, time_point now, uint8_t reasons) {
  if (!st.due || st.due_at > now) st.due_at = now;
  st.due = true;
  st.reasons |= reasons;
}

/// No progress (its `failures` counted already): backs off from 1 s to 300 s, and says `what`
/// happened (one warning a minute under `key` for all shards: a handler bug can stall every shard
/// at once; each shard's count shows as failuresInARow in the views).
void back_off_no_progress(shard_state& st, time_point now, const char* key, std::string_view what) {
  auto d = rules::backoff(st.failures, rules::no_progress_base, rules::no_progress_cap, st.rng());
  st.not_before = now + d;
  logging::warn_limited(key, fmt::format("{} shard={} failures={} next_try_ms={}", what, st.shard,
                                         st.failures, static_cast<long long>(d.count())));
}

/// The lease ended: what the holder reported decides when the shard is next due, and why.
uint8_t on_lease_end(shard_ptr self, const lease_end& e) {
  auto& st = self->state;
  auto now = self->clock().now();
  st.leased = false;
  if (e.crashed) {  // a crash, a revoked lease, or a worker that never reported
    become_due(st, now, proto::reason_recovery);
    if (e.invoked && e.holders_fault) {
      st.failures++;
      if (e.overran && !e.wrote) {
        // Its invocation ran out budget + grace and nothing reached the shard: as a budget spent
        // without a step (below), it backs off as no progress, not as a crash.
        back_off_no_progress(st, now, "no progress after time-out",
                             "a shard's invocation did not answer within budget + grace and "
                             "nothing was written to the shard; a step of it, or of another shard "
                             "of the invocation, may take longer than the budget");
        return shard_status::stalled;
      }
      st.not_before =
          now + rules::backoff(st.failures, rules::failure_base, rules::failure_cap, st.rng());
    }
    return shard_status::crash;
  }
  // Whatever it reported, the types it had no code for route the next invocation (choose_endpoint).
  st.awaiting = e.types;
  if (e.flags & proto::idle_busy) {  // work left now: handed back
    become_due(st, now, proto::reason_handback);
    if ((e.flags & proto::idle_expired) && e.steps == 0) {
      st.failures++;
      back_off_no_progress(st, now, "no progress",
                           "a shard reached its invocation budget without finishing a step; a "
                           "step may take longer than the budget");
      return shard_status::no_progress;
    }
    st.failures = 0;
    st.not_before = {};  // progress ends an earlier failure's backoff
    return shard_status::handback;
  }
  // Idle: due again at its next timer, or now if another endpoint has code the holder lacked.
  st.failures = 0;
  st.not_before = {};
  st.due = e.due_in_ms != proto::nothing_due;
  auto from = e.reported_at != 0 ? std::min(clock_at(e.reported_at), now) : now;
  st.due_at =
      st.due ? from + ms{static_cast<int64_t>(std::min<uint64_t>(e.due_in_ms, 1ull << 40))} : now;
  st.reasons = st.due ? proto::reason_timer : 0;
  // (the holder's own endpoint lacks them; a long-lived holder has none)
  int holders = e.invoked ? st.last_endpoint : -1;
  for (auto& t : e.types)
    for (size_t i = 0; i < st.types->size(); ++i)
      if (static_cast<int>(i) != holders &&
          std::find((*st.types)[i].begin(), (*st.types)[i].end(), t) != (*st.types)[i].end())
        become_due(st, now, proto::reason_code);
  return shard_status::no_event;
}

actor_stats stats_of(shard_ptr self);
void init_state(shard_state& st, uint32_t shard, const endpoint_types& types, bool owned);
resting_record rest_of(const shard_state& st);
void restore(shard_state& st, const resting_record& r);

shard_actor::behavior_type shard_fn(shard_ptr self, uint32_t shard, scheduler_actor scheduler,
                                    std::shared_ptr<const endpoint_types> types, uint64_t seed,
                                    bool owned, resting_record rest) {
  auto& st = self->state;
  st.scheduler = std::move(scheduler);
  st.types = std::move(types);
  st.rng.state = seed ^ (uint64_t{shard} * 0x9E3779B97F4A7C15ull) ^ uint64_t(rest.due_at);
  // Due once at start, for `recovery`; the scheduler assumes the same status (initial_status).
  init_state(st, shard, *st.types, owned);
  if (rest.stored) {  // back from rest: what the scheduler last heard is its state now
    restore(st, rest);
    st.told = status_of(st, self->clock().now());
  }
  return {
      [=](due_atom, uint8_t reasons, const std::string& start_type) {
        auto& st = self->state;
        become_due(st, self->clock().now(), reasons);
        if (!start_type.empty() &&
            std::find(st.starts.begin(), st.starts.end(), start_type) == st.starts.end())
          st.starts.push_back(start_type);
        update(self);
      },
      [=](undue_atom, uint8_t reasons) {
        auto& st = self->state;
        if (st.leased || !st.due) return;
        st.reasons &= static_cast<uint8_t>(~reasons);
        if (reasons & proto::reason_call) {
          st.starts.clear();  // (only calls bring start types)
          st.starts.shrink_to_fit();
        }
        // Due for nothing else: idle, its backoff kept for the next time it is due. (Another
        // reason left keeps it due now: a timer's own time is not kept once a call made it due.)
        if (st.reasons == 0) st.due = false;
        update(self);
      },
      [=](leased_atom, int32_t endpoint) {
        auto& st = self->state;
        st.leased = true;
        if (endpoint >= 0) st.last_endpoint = static_cast<int16_t>(endpoint);
        st.due = false;
        st.reasons = 0;
        st.starts.clear();
        st.starts.shrink_to_fit();
        update(self);
      },
      [=](const lease_end& e) { update(self, on_lease_end(self, e)); },
      [=](retire_atom) -> caf::result<resting_record> {
        auto& st = self->state;
        if (!st.starts.empty() || !st.awaiting.empty()) return resting_record{};  // not now
        auto rp = self->make_response_promise<resting_record>();
        rp.deliver(rest_of(st));
        self->quit();
        return rp;
      },
      [=](stats_atom) { return stats_of(self); },
  };
}

/// A record's stats (docs/operations.md, "shard").
actor_stats stats_of(const shard_state& st, time_point now, size_t mailbox) {
  auto left = [&](time_point t) {
    return t > now ? std::chrono::duration_cast<ms>(t - now).count() : int64_t{0};
  };
  actor_stats a{"shard", st.shard};
  a.state = st.leased             ? "held"
            : !st.due             ? "idle"
            : st.not_before > now ? "backoff"
            : st.due_at > now     ? "waiting"
                                  : "due";
  a.mailbox = mailbox;
  a.num("dueInMs", st.due && !st.leased ? left(std::max(st.due_at, st.not_before)) : -1);
  a.text("reasons", proto::reasons_text(st.reasons));
  a.num("failuresInARow", st.failures);
  a.num("backoffMs", left(st.not_before));
  a.num("lastEndpoint", st.last_endpoint);
  std::string starts, awaiting;
  for (auto& t : st.starts)
    starts += (starts.empty() ? "" : ",") + t;
  for (auto& t : st.awaiting)
    awaiting += (awaiting.empty() ? "" : ",") + t;
  a.text("startsWaiting", starts);
  a.text("awaitingCodeFor", awaiting);
  return a;
}

actor_stats stats_of(shard_ptr self) {
  return stats_of(self->state, self->clock().now(), self->mailbox().size());
}

/// A record's state at spawn: due once, for `recovery`, if this node serves the shard.
void init_state(shard_state& st, uint32_t shard, const endpoint_types& types, bool owned) {
  st.shard = shard;
  st.due = owned;
  st.reasons = owned ? proto::reason_recovery : 0;
  st.told = initial_status(shard, types, owned);
}

}  // namespace

shard_status initial_status(uint32_t shard, const endpoint_types& types, bool owned) {
  shard_status s;
  s.shard = shard;
  if (!owned) return s;  // idle, no reasons, no endpoint
  s.state = shard_status::ready;
  s.reasons = proto::reason_recovery;
  s.endpoint = static_cast<int16_t>(rules::choose_endpoint(types, {}, {}, -1));
  return s;
}

actor_stats resting_shard_stats(uint32_t shard, const endpoint_types& types, bool owned,
                                const resting_record& rest, caf::actor_clock::time_point now) {
  shard_state st;
  init_state(st, shard, types, owned);
  if (rest.stored) restore(st, rest);
  auto a = stats_of(st, rest.stored ? now : time_point{}, 0);
  a.text("actor", rest.stored ? "resting" : "never spawned");
  return a;
}

shard_actor spawn_shard(caf::actor_system& sys, uint32_t shard, scheduler_actor scheduler,
                        std::shared_ptr<const endpoint_types> types, uint64_t seed, bool owned,
                        resting_record rest) {
  return sys.spawn<caf::lazy_init>(shard_fn, shard, std::move(scheduler), std::move(types), seed,
                                   owned, rest);
}

}  // namespace fusee::server
