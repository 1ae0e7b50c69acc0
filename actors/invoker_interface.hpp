// The invoker's typed actor interfaces: one wake-record actor per shard, one actor per endpoint,
// and the scheduler, with the messages between them and from the directory. The compiler checks
// every message (one line per message below).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/cluster/withheld.hpp"
#include "actors/http_client.hpp"
#include "actors/inspect/stats.hpp"
#include "actors/lease_log.hpp"

namespace fusee::server {

/// How a lease ended, from the directory to the shard's wake record: with the holder's IDLE
/// report for the shard, or `crashed` (no report: a crash, a revocation, a silent worker).
struct lease_end {
  uint8_t flags = 0;
  uint64_t due_in_ms = UINT64_MAX;  ///< protocol's nothing_due
  /// When the IDLE frame was read (actor clock ns; 0: when the record hears of it): due_in_ms
  /// counts from then, so a record that hears late (a million leases ending at once) is not late.
  int64_t reported_at = 0;
  uint64_t steps = 0;
  uint64_t open_us = 0;
  std::vector<std::string> types;  ///< types the holder had no code for
  bool crashed = false;
  bool invoked = false;  ///< the holder was an invoked worker
  /// False when this node ended the lease (a withholding): an unreported end is then not the
  /// invoked worker's crash (no backoff).
  bool holders_fault = true;
  /// Unreported, because the holder's invocation ran out budget + grace after its worker leased
  /// its shards (the endpoint fenced it): a step may be longer than the budget.
  bool overran = false;
  /// Whether any record was appended under the lease (the log says, at the revocation); true
  /// when not known.
  bool wrote = true;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lease_end& x) {
  return f(caf::meta::type_name("fusee.lease_end"), x.flags, x.due_in_ms, x.reported_at, x.steps,
           x.open_us, x.types, x.crashed, x.invoked, x.holders_fault, x.overran, x.wrote);
}

/// The times the invoker's messages carry (shard_status::ready_at, resting_record): the actor
/// clock's nanoseconds since its epoch, and back.
inline int64_t clock_ns(caf::actor_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline caf::actor_clock::time_point clock_at(int64_t ns) {
  return caf::actor_clock::time_point{
      std::chrono::duration_cast<caf::actor_clock::time_point::duration>(
          std::chrono::nanoseconds{ns})};
}

/// A wake record's state as the scheduler needs it. `state`: idle (nothing due, or leased),
/// waiting (due at `ready_at`), backoff (due, but backing off until `ready_at`), ready (due now).
/// `endpoint` is the one its invocation goes to when ready. The scheduler keeps the timers: at
/// `ready_at` it counts a waiting or backing-off shard ready itself (no message per shard when a
/// million timers fire at once).
struct shard_status {
  enum : uint8_t { idle = 0, waiting = 1, backoff = 2, ready = 3 };
  /// `stalled`: a crash (no report) that was also no progress (lease_end::overran, nothing
  /// written).
  enum : uint8_t { no_event = 0, handback = 1, crash = 2, no_progress = 3, stalled = 4 };
  uint32_t shard = 0;
  uint8_t state = idle;
  uint8_t reasons = 0;
  int16_t endpoint = -1;
  uint8_t event = no_event;  ///< counted in the metrics
  int64_t ready_at = 0;      ///< waiting, backoff: the actor clock's nanoseconds since its epoch
  bool operator==(const shard_status&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_status& x) {
  return f(caf::meta::type_name("fusee.shard_status"), x.shard, x.state, x.reasons, x.endpoint,
           x.event, x.ready_at);
}

/// An INVOKED HELLO: bind the worker on `session` to `invocation`.
struct bind_request {
  uint64_t invocation = 0;
  session_id session = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, bind_request& x) {
  return f(caf::meta::type_name("fusee.bind_request"), x.invocation, x.session);
}

/// The invoker's answer to a bind: `bound` (the shards to offer, the budget left), `unknown`
/// (no such invocation, or it is over: UNKNOWN_INVOCATION) or `taken` (another connection
/// answers it: INVOCATION_TAKEN).
enum class bind_code : uint8_t { bound = 0, unknown = 1, taken = 2 };

/// A report of an invoked worker's shard, from the directory to the invocation's endpoint.
struct shard_reported {
  uint64_t steps = 0;
  uint64_t open_us = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_reported& x) {
  return f(caf::meta::type_name("fusee.shard_reported"), x.steps, x.open_us);
}

/// The invoked worker got its LEASE with `shards` grants, from the directory to the endpoint.
struct invocation_leased {
  uint64_t invocation = 0;
  uint32_t shards = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, invocation_leased& x) {
  return f(caf::meta::type_name("fusee.invocation_leased"), x.invocation, x.shards);
}

/// What the directory may tell the endpoint that owns an invoked worker's invocation.
using invocation_actor =
    caf::typed_actor<caf::reacts_to<invocation_leased>, caf::reacts_to<shard_reported>>;

struct bind_result {
  bind_code code = bind_code::unknown;
  std::vector<uint32_t> shards;
  uint32_t remaining_ms = 0;
  int32_t endpoint_index = -1;  ///< the wake records remember it as the last endpoint
  invocation_actor endpoint;    ///< told when the worker leased and when it reports
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, bind_result& x) {
  return f(caf::meta::type_name("fusee.bind_result"), x.code, x.shards, x.remaining_ms,
           x.endpoint_index, x.endpoint);
}

/// An invocation ended (its POST was answered, failed or timed out), from its endpoint.
struct invocation_ended {
  uint32_t endpoint = 0;
  uint64_t invocation = 0;
  std::vector<uint32_t> shards;
  bool success = false;
  uint64_t backoff_ms = 0;  ///< how long the endpoint takes no new invocation
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, invocation_ended& x) {
  return f(caf::meta::type_name("fusee.invocation_ended"), x.endpoint, x.invocation, x.shards,
           x.success, x.backoff_ms);
}

/// An invocation's leases must end (fencing), from its endpoint to the directory: every lease the
/// worker on `session` still holds is revoked; the connection stays open.
struct fence_request {
  session_id session = 0;
  /// The invocation ran out budget + grace after its worker leased its shards (lease_end).
  bool overran = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, fence_request& x) {
  return f(caf::meta::type_name("fusee.fence_request"), x.session, x.overran);
}

/// What is wrong with an endpoint, for the calls that expire while parked for a holder: its last
/// error while its invocations fail (or a worker of it timed out after leasing), "" once one
/// succeeds. Sent when it changes.
struct endpoint_trouble {
  uint32_t endpoint = 0;
  std::string text;  ///< "endpoint 0 (http://...): answered HTTP 401: ..." or ""
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, endpoint_trouble& x) {
  return f(caf::meta::type_name("fusee.endpoint_trouble"), x.endpoint, x.text);
}

/// The part of the directory the endpoints talk to.
using fence_actor = caf::typed_actor<caf::reacts_to<fence_request>,      ///< fence a worker
                                     caf::reacts_to<endpoint_trouble>>;  ///< an endpoint's state

/// A wake record at rest, without its actor (wake_records.hpp keeps these 32 bytes): all a record
/// knows but the types of waiting starts and of runs its last holder had no code for (a record
/// holding any of those does not rest). Times are the actor clock's nanoseconds since its epoch.
struct resting_record {
  int64_t due_at = 0;
  int64_t not_before = 0;
  uint32_t failures = 0;
  int16_t last_endpoint = -1;
  uint8_t reasons = 0;
  bool due = false;
  bool leased = false;
  bool stored = false;  ///< false: nothing stored (the record declined, or was never retired)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, resting_record& x) {
  return f(caf::meta::type_name("fusee.resting_record"), x.due_at, x.not_before, x.failures,
           x.last_endpoint, x.reasons, x.due, x.leased, x.stored);
}

/// A shard's wake record: what it waits for and when it is next due. It tells the scheduler
/// whenever its state changes (shard_status, with the time it becomes ready; the scheduler keeps
/// the timers). A record starts due for `recovery` (every shard is due once at start); the
/// scheduler's view starts the same way, so start-up costs no message per shard.
using shard_actor =
    caf::typed_actor<caf::reacts_to<due_atom, uint8_t, std::string>,  ///< work arrived: reasons, a
                                                                      ///< start's type
                     /// What came for these reasons is gone (every parked call expired): not due
                     /// for them any more; ignored while a worker holds the shard.
                     caf::reacts_to<undue_atom, uint8_t>,
                     /// A worker holds the shard (never due while it does): the endpoint index of
                     /// its invocation, or -1 for a worker that was not invoked.
                     caf::reacts_to<leased_atom, int32_t>,
                     caf::reacts_to<lease_end>,  ///< the lease ended, with what IDLE said
                     /// From the directory: rest (stored: it ended) or not (it goes on).
                     caf::replies_to<retire_atom>::with<resting_record>,
                     caf::replies_to<stats_atom>::with<actor_stats>>;  ///< introspection

/// One configured endpoint: signs and sends the POSTs, binds the invoked worker to its
/// invocation, and fences the invocation's leases when it ends.
using endpoint_actor = invocation_actor::extend<
    caf::reacts_to<invoke_atom, uint64_t, std::vector<uint32_t>, uint8_t>,  ///< id, shards, reasons
    caf::replies_to<bind_request>::with<bind_result>,  ///< delegated by the scheduler
    caf::reacts_to<http_result>,                       ///< its POST completed (curl thread)
    caf::reacts_to<fencelater_atom, uint64_t>,         ///< close grace over for a session
    caf::replies_to<metrics_atom>::with<std::string>,  ///< its part of /v1/invoker
    caf::replies_to<stats_atom>::with<actor_stats>>;   ///< introspection

/// What the directory needs of the scheduler: to say it knows the invoker (dispatching starts
/// then, so the directory knows the invoker before any POST names an invocation), to bind
/// invoked workers (the scheduler knows which endpoint owns an invocation and delegates), and to
/// stop it once the log failed (every invoked worker would find its shards ungrantable).
using binder_actor = caf::typed_actor<
    /// Dispatching may start; these shards are held already (their records hear so next: none is
    /// invoked for meanwhile).
    caf::reacts_to<caf::put_atom, std::vector<uint32_t>>,
    caf::replies_to<bind_request>::with<bind_result>,  ///< an invoked worker's HELLO
    caf::reacts_to<halt_atom, std::string>,            ///< the log failed (why): dispatch no more
    caf::reacts_to<withheld_shards>>;  ///< invoke none of these (cluster: withheld.hpp)

/// Knows which shards are ready (an index per endpoint, O(due) per dispatch) and groups them into
/// invocations within each endpoint's free slots.
using scheduler_actor = binder_actor::extend<
    caf::reacts_to<shard_status>,         ///< from a wake record
    caf::reacts_to<invocation_ended>,     ///< from an endpoint: a slot is free
    caf::reacts_to<tick_atom, uint64_t>,  ///< own timer (shards' due times, endpoint backoff);
                                          ///< 0 = coalesced dispatch
    caf::reacts_to<gather_atom>,          ///< own timer: the gather window is over
    caf::replies_to<metrics_atom, uint64_t>::with<std::string>,          ///< parked calls -> JSON
    caf::replies_to<stats_atom>::with<actor_stats>,                      ///< introspection
    caf::replies_to<endpoints_atom>::with<std::vector<endpoint_actor>>,  ///< for the inspector
    /// A byte per shard of [from, to] (clamped; invoker_mark_of), for the inspector's states: no
    /// message per shard.
    caf::replies_to<view_atom, uint32_t, uint32_t>::with<std::string>,
    /// The full views of a request's shards (the inspector's page), in its order.
    caf::replies_to<shard_details_request>::with<std::vector<shard_invoker_view>>>;

class wake_records;

/// What spawn_invoker() starts; the directory sends shard events to the wake records directly
/// (wake_records.hpp: each is spawned at its first message).
struct invoker_handles {
  scheduler_actor scheduler;
  std::shared_ptr<wake_records> records;
};

}  // namespace fusee::server
