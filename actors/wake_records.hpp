// The shards' wake records as the directory, the scheduler and the inspector share them. A record
// is spawned when it gets its first message: a record never spawned is exactly in its initial
// state (shard.hpp, initial_status), so spawning it then is the same as spawning it at start, and
// a million shards nobody has touched cost no actor (docs/architecture.md, "Scale").
//
// Threading: any thread; one mutex, held for a lookup (and a spawn, the first time).
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "actors/invoker_interface.hpp"

namespace fusee::server {

class wake_records {
public:
  /// Spawns the record of a shard (spawn_shard with the invoker's scheduler and endpoint types).
  using spawner = std::function<shard_actor(uint32_t shard)>;
  /// What a record never spawned would answer to stats_atom (its initial state).
  using describer = std::function<actor_stats(uint32_t shard)>;
  wake_records(uint32_t shards, spawner spawn, describer initial = {});

  uint32_t size() const { return static_cast<uint32_t>(records_.size()); }
  /// The record of `shard`, spawned now if it never was (null once shut down).
  shard_actor get(uint32_t shard);
  /// The record of `shard` if it was spawned, else null (it is in its initial state).
  shard_actor find(uint32_t shard) const;
  /// Records spawned so far.
  uint64_t spawned() const;
  /// The stats of `shard`'s record as it is before its first message.
  actor_stats initial_stats(uint32_t shard) const;
  /// Ends every spawned record (the invoker stops).
  void shut_down();
  /// Tests: `shard`'s record is `a` from now on.
  void set(uint32_t shard, shard_actor a);

private:
  mutable std::mutex mtx_;
  std::vector<shard_actor> records_;
  spawner spawn_;
  describer initial_;
  uint64_t spawned_ = 0;
  bool down_ = false;
};

}  // namespace fusee::server
