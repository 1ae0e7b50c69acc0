// The shards' wake records as the directory, the scheduler and the inspector share them. A record
// is an actor only while it is in use: it is spawned at its first message (a record never spawned
// is exactly in its initial state, shard.hpp's initial_status, so spawning it then is the same as
// spawning it at start), and one nothing was sent to for a while is retired to its 32-byte
// resting_record (48 bytes with its slot) by the directory and spawned again from them at its next
// message. So a million shards cost an actor only for those in use (docs/architecture.md, "Scale").
//
// Threading: any thread; one mutex, held for a look-up (and a spawn).
#pragma once

#include <functional>
#include <mutex>
#include <vector>

#include "actors/invoker_interface.hpp"

namespace fusee::server {

class wake_records {
public:
  /// Spawns the record of a shard (spawn_shard with the invoker's scheduler and endpoint types),
  /// from its initial state or from `rest` (stored).
  using spawner = std::function<shard_actor(uint32_t shard, const resting_record& rest)>;
  /// What a record without an actor answers to stats_atom (resting_shard_stats).
  using describer = std::function<actor_stats(uint32_t shard, const resting_record& rest,
                                              caf::actor_clock::time_point now)>;
  wake_records(uint32_t shards, spawner spawn, describer describe = {});

  uint32_t size() const { return static_cast<uint32_t>(slots_.size()); }
  /// The record of `shard`, spawned now if it has no actor (null once shut down). It counts as
  /// used in this period (advance_period).
  shard_actor get(uint32_t shard);
  /// The record of `shard` if it has an actor, else null.
  shard_actor find(uint32_t shard) const;
  /// The stats of `shard`'s record while it has no actor.
  actor_stats resting_stats(uint32_t shard, caf::actor_clock::time_point now) const;

  /// Starts a new period: records not used in two whole periods count as quiet.
  void advance_period();
  /// Up to `max` shards whose record has an actor and was not used for two whole periods, each
  /// found once a period (the search goes on where the last call stopped).
  std::vector<uint32_t> quiet(size_t max);
  /// `shard`'s record ended, resting as `rest`: its next get() spawns it from there.
  void rest(uint32_t shard, const resting_record& rest);

  uint64_t spawned() const;  ///< spawns so far
  uint64_t actors() const;   ///< records that have an actor now
  /// Ends every record's actor (the invoker stops).
  void shut_down();
  /// Tests: `shard`'s record is `a` from now on.
  void set(uint32_t shard, shard_actor a);

private:
  struct slot {
    shard_actor actor;
    resting_record rest;
    uint32_t used = 0;  ///< the period it was last used in
  };
  mutable std::mutex mtx_;
  std::vector<slot> slots_;
  spawner spawn_;
  describer describe_;
  uint32_t period_ = 2;
  uint32_t cursor_ = 0;  ///< where quiet() goes on this period
  uint64_t spawned_ = 0;
  uint64_t actors_ = 0;
  bool down_ = false;
};

}  // namespace fusee::server
