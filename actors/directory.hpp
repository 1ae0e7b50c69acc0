// The directory: who holds which shard under which epoch, the standby order, and the routing of
// calls and messages to holders. Lease changes go through the log first (grants are durable
// records), so the directory learns of them by message from the log sink.
#pragma once

#include <cstdint>

#include <caf/fwd.hpp>

namespace fusee::server {

class wal_writer;

struct directory_config {
  uint32_t shards = 16;
  uint32_t ping_interval_ms = 1000;
  uint32_t timeout_ms = 5000;
  uint32_t park_ms = 30000;
};

caf::actor spawn_directory(caf::actor_system& sys, directory_config cfg, wal_writer* wal);

}  // namespace fusee::server
