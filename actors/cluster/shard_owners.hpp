// Which node of the cluster serves each shard, as this node's actors see it (DESIGN.md §7): the
// one rule the sessions (shard requests), the directory (leases, calls, messages) and the invoker
// (what may become due) share. Outside a cluster every shard is this node's. No CAF here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "actors/node_settings.hpp"
#include "protocol/errors.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

class shard_owners {
public:
  /// Every shard is this node's.
  shard_owners() = default;
  /// From a checked `[cluster]` (app::validate); outside a cluster, every shard is this node's.
  explicit shard_owners(const node_settings& cfg);

  bool clustered() const { return !ranges_.empty(); }
  /// True if this node serves `shard` (shards past the count are nobody's: callers refuse them).
  bool mine(uint32_t shard) const { return ranges_.empty() || owner_index(shard) == self_; }
  /// The index in the map of the node serving `shard`, or nullopt past the shard count (and
  /// outside a cluster).
  std::optional<size_t> owner_index(uint32_t shard) const;
  /// This node's index in the map (0 outside a cluster).
  size_t self() const { return self_; }
  /// How many shards this node serves in a cluster (outside one: 0; every shard is its own).
  uint64_t own_shard_count() const { return own_count_; }
  /// The index in the map of the node named `name`, or nullopt.
  std::optional<size_t> index_of(const std::string& name) const;
  /// The name of this node in the map ("" outside a cluster).
  const std::string& self_name() const;
  /// The nodes of the map (empty outside a cluster).
  const std::vector<proto::cluster_node>& nodes() const { return nodes_; }
  /// "node b (workers 127.0.0.1:7500)"
  std::string describe(size_t node) const;
  /// For a shard request on a shard another node serves: NOT_HOLDER naming that node, else
  /// nothing (this node's shards, and shards past the count, which the caller refuses itself).
  std::optional<proto::error> refuse_foreign(uint32_t shard) const;
  /// The same map as workers are told it (CLUSTER_MAP answering HELLO `id`), built once.
  proto::cluster_map_frame map_frame(uint64_t id) const {
    auto f = map_frame_;
    f.id = id;
    return f;
  }

private:
  struct owned_range {
    uint32_t first = 0, last = 0;
    size_t node = 0;
  };
  std::vector<owned_range> ranges_;  ///< sorted by first shard; empty outside a cluster
  std::vector<proto::cluster_node> nodes_;
  size_t self_ = 0;
  uint64_t own_count_ = 0;
  proto::cluster_map_frame map_frame_;  ///< id 0; no nodes outside a cluster
};

}  // namespace fusee::server
