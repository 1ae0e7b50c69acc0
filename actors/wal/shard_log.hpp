// One shard's state in the log, as recovery rebuilds it and the writer keeps it: the fencing
// facts (epoch, holder), LSNs, and the index from LSNs to the records' places on disk.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/lease_log.hpp"
#include "actors/wal/format.hpp"
#include "actors/wal/section_index.hpp"
#include "protocol/ids.hpp"

namespace fusee::server::wal {

struct shard_log {
  proto::epoch_t epoch{};    ///< last granted
  session_id holder = 0;     ///< live lease, 0 = none
  uint64_t last_lsn = 0;     ///< last queued
  uint64_t granted_lsn = 0;  ///< last_lsn when `epoch` was granted (did its holder write?)
  uint64_t durable_lsn = 0;
  uint64_t ckpt_lsn = 0;
  section_index index;  ///< by first_lsn, one entry per records section
};

/// The snapshot that starts a segment: every shard with state (an epoch or records).
inline snapshot_section snapshot_of(const std::vector<shard_log>& shards) {
  snapshot_section snap;
  for (uint32_t s = 0; s < shards.size(); ++s)
    if (shards[s].epoch.value() > 0 || shards[s].last_lsn > 0)
      snap.shards.push_back(snapshot_entry{s, shards[s].epoch.value(), shards[s].last_lsn});
  return snap;
}

}  // namespace fusee::server::wal
