// The directory: who holds which shard under which epoch, the standby order, and the routing of
// calls and messages to holders. Lease changes go through the log first (grants are durable
// records, revocations are ordered behind the records queued before them), so the directory
// learns of them by message from the log (lease_log.hpp). Interface: directory_interface.hpp.
#pragma once

#include "actors/directory_interface.hpp"
#include "actors/node_settings.hpp"

namespace fusee::server {

/// Uses `shards`, `ping_interval_ms`, `timeout_ms` and `park_ms` of `settings`; `log` must
/// outlive the actor.
directory_actor spawn_directory(caf::actor_system& sys, const node_settings& settings,
                                lease_log* log);

}  // namespace fusee::server
