// Shards a node of a cluster serves but leases to no worker for now (DESIGN.md §7, "a different
// map"): all of them until the node has heard every peer once since it started, and those a
// peer's different map gives to another node while that peer serves it. map_agreement decides
// and the cluster actor tells the directory (no grant, leases revoked), which tells the scheduler
// (no invocation).
#pragma once

#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "actors/cluster/shard_owners.hpp"
#include "protocol/cluster_map.hpp"

namespace fusee::proto {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_range& x) {
  return f(caf::meta::type_name("fusee.shard_range"), x.first, x.last);
}

}  // namespace fusee::proto

namespace fusee::server {

/// Shards withheld for one reason.
struct withheld {
  std::vector<proto::shard_range> ranges;  ///< ascending, none overlapping
  std::string why;                         ///< for errors, REVOKED and the log
  /// A peer's map gives them to another node: calls fail at once. Otherwise the node is starting
  /// and calls park as for a shard nobody holds.
  bool conflict = false;
  bool operator==(const withheld&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, withheld& x) {
  return f(caf::meta::type_name("fusee.withheld"), x.ranges, x.why, x.conflict);
}

/// Everything withheld now; each message replaces the one before (empty: nothing withheld).
struct withheld_shards {
  std::vector<withheld> parts;
  bool operator==(const withheld_shards&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, withheld_shards& x) {
  return f(caf::meta::type_name("fusee.withheld_shards"), x.parts);
}

/// What a node withholds as it starts, before it has heard each peer (up, refused or not
/// reached): every shard it serves. Nothing outside a cluster or in a cluster of one node.
withheld_shards starting_hold(const shard_owners& owners);

/// Bit s set <=> `w` withholds shard s, for shards 0..`shards`-1 (the directory's and the
/// scheduler's flags are set from it).
std::vector<bool> withheld_bits(const withheld_shards& w, size_t shards);

/// The part of `w` that withholds `shard`, or null.
const withheld* withholding(const withheld_shards& w, uint32_t shard);

}  // namespace fusee::server
