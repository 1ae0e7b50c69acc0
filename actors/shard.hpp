// A shard's wake record as its own actor: the reasons it is due, when (its due time and backoff:
// the scheduler keeps the timers), and the endpoint its next invocation should go to. Interface:
// shard_actor in invoker_interface.hpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actors/invoker_interface.hpp"

namespace fusee::server {

/// The types each endpoint serves, by endpoint index; shared read-only by every wake record.
using endpoint_types = std::vector<std::vector<std::string>>;

/// What every wake record is at spawn, and what the scheduler assumes without a message: due
/// for `recovery`, ready for the endpoint the choice rules give a shard never invoked; idle for
/// a shard another node of the cluster serves (`owned` false: it never becomes due here).
shard_status initial_status(uint32_t shard, const endpoint_types& types, bool owned = true);

/// What the record of `shard` would answer to stats_atom when it has no actor (wake_records.hpp):
/// at rest as `rest` says, or (rest.stored false) in its initial state, never told anything. The
/// `actor` text says which.
actor_stats resting_shard_stats(uint32_t shard, const endpoint_types& types, bool owned,
                                const resting_record& rest, caf::actor_clock::time_point now);

/// Spawns the wake record of `shard` (lazily: it costs no scheduling until its first message),
/// from its initial state or from `rest` (stored). `seed` seeds its jitter; it reports to
/// `scheduler`.
shard_actor spawn_shard(caf::actor_system& sys, uint32_t shard, scheduler_actor scheduler,
                        std::shared_ptr<const endpoint_types> types, uint64_t seed,
                        bool owned = true, resting_record rest = {});

}  // namespace fusee::server
