// The invoker's typed actor interfaces: one wake-record actor per shard, one actor per endpoint,
// and the scheduler. The compiler checks every message between them (and from the directory).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/atoms.hpp"

namespace fusee::server {

/// A shard's wake record: what it waits for and when it is next due. It tells the scheduler
/// whenever its state changes (status_atom) and arms its own timers for due times and backoff.
/// A record starts due for `recovery` (every shard is due once at start); the scheduler's view
/// starts the same way, so start-up costs no message per shard.
using shard_actor =
    caf::typed_actor<caf::reacts_to<due_atom, uint8_t, std::string>,  ///< work arrived: reasons, a
                                                                      ///< start's type or ""
                     /// A worker holds the shard (never due while it does); the endpoint index of
                     /// its invocation, or -1 for a worker that was not invoked.
                     caf::reacts_to<leased_atom, int32_t>,
                     caf::reacts_to<report_atom, lease_end>,  ///< the lease ended, with what IDLE
                                                              ///< said
                     caf::reacts_to<tick_atom, uint64_t>>;    ///< own timer (generation)

/// One configured endpoint: signs and sends the POSTs, binds the invoked worker to its
/// invocation, and fences the invocation's leases when it ends.
using endpoint_actor = caf::typed_actor<
    caf::reacts_to<invoke_atom, uint64_t, std::vector<uint32_t>, uint8_t>,  ///< id, shards, reasons
    caf::replies_to<bind_atom, uint64_t, uint64_t>::with<uint32_t, std::vector<uint32_t>,
                                                         uint32_t>,  ///< see scheduler
    caf::reacts_to<leased_atom, uint64_t, uint32_t>,                 ///< invocation, shards granted
    caf::reacts_to<report_atom, uint64_t, uint64_t>,    ///< steps, open_us of a reported shard
    caf::reacts_to<httpdone_atom, http_outcome>,        ///< the POST completed
    caf::reacts_to<fencelater_atom, uint64_t>,          ///< close grace over for a session
    caf::replies_to<metrics_atom>::with<std::string>>;  ///< its part of /v1/invoker

/// Knows which shards are ready (an index per endpoint, O(due) per dispatch), groups them into
/// invocations within each endpoint's free slots, and routes binds and HTTP completions.
using scheduler_actor = caf::typed_actor<
    /// The wake records, once, from the directory: dispatching starts then.
    caf::reacts_to<caf::put_atom, std::vector<shard_actor>>,
    caf::reacts_to<status_atom, shard_status>,                 ///< from a wake record
    caf::reacts_to<report_atom, int32_t, uint64_t, uint64_t>,  ///< endpoint, steps, open_us
    /// An INVOKED HELLO (invocation, session): (code, shards, remaining budget ms, endpoint
    /// index); code 0 = bound, 7 = unknown or finished invocation, 8 = another connection
    /// holds it.
    caf::replies_to<bind_atom, uint64_t, uint64_t>::with<uint32_t, std::vector<uint32_t>, uint32_t,
                                                         int32_t>,
    caf::reacts_to<leased_atom, uint64_t, uint32_t>,  ///< invocation, shards granted
    caf::reacts_to<httpdone_atom, http_outcome>,      ///< from the curl thread
    caf::reacts_to<ended_atom, uint32_t, uint64_t, std::vector<uint32_t>, bool,
                   uint64_t>,  ///< endpoint, invocation, shards, success, endpoint backoff ms
    caf::reacts_to<tick_atom, uint64_t>,  ///< own timer; 0 = coalesced dispatch
    caf::reacts_to<gather_atom>,          ///< own timer: the gather window is over
    caf::replies_to<metrics_atom, uint64_t>::with<std::string>>;  ///< parked calls -> JSON

/// What spawn_invoker() starts; the directory sends shard events to `shards[i]` directly.
struct invoker_handles {
  scheduler_actor scheduler;
  std::vector<shard_actor> shards;
};

}  // namespace fusee::server
