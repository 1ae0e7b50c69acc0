// The cluster's static shard map (DESIGN.md §7, `[cluster]` in the TOML): every node's name and
// addresses and the shard ranges it owns. Pure: read and checked here; the server asks it which
// node owns a shard, workers which nodes to connect to, and peers compare its digest.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/result.hpp"

namespace fusee::proto {

/// Shards first..last, both included.
struct shard_range {
  uint32_t first = 0;
  uint32_t last = 0;
  bool operator==(const shard_range&) const = default;
};

struct cluster_node {
  std::string name;
  std::string cluster;  ///< host:port of its CAF middleman (the other nodes dial it)
  std::string listen;   ///< host:port for workers and clients
  std::string http;     ///< host:port of its HTTP API; empty = none
  std::vector<shard_range> shards;
};

struct cluster_map {
  std::vector<cluster_node> nodes;

  /// The index in `nodes` of the node owning `shard`, or nullopt (a map that passed
  /// check_cluster_map() owns every shard of its count).
  std::optional<size_t> owner_of(uint32_t shard) const;
  /// One line per node, by name, ranges ascending: what two nodes must agree on byte for byte.
  std::string canonical() const;
  /// SHA-256 of canonical(), lowercase hex.
  std::string digest() const;
};

/// "0-7", "12", "0-7, 12, 20-31": ranges in any order, each first <= last.
result<std::vector<shard_range>> parse_shard_ranges(std::string_view text);
/// The ranges written back ("0-7, 12").
std::string format_shard_ranges(const std::vector<shard_range>& ranges);

/// A map written by cluster_map::canonical() read back (a peer's map, to find the shards both
/// claim); an error names the line it cannot read.
result<cluster_map> parse_canonical(std::string_view text);

/// The shards `ours` gives to node `self` that `theirs` gives to another node or to none: two
/// nodes serving these maps could both lease them. Ascending, adjacent ones merged; empty when
/// `ours` gives `self` nothing.
std::vector<shard_range> contested_shards(const cluster_map& ours, const std::string& self,
                                          const cluster_map& theirs);

/// What is wrong with `map` for `shard_count` shards, or nullopt: names present and unique, at
/// least one node, ranges inside 0..shard_count-1 and covering every shard exactly once (an
/// overlap names both nodes and the shards, a gap names the shards no node owns).
std::optional<std::string> check_cluster_map(const cluster_map& map, uint32_t shard_count);

}  // namespace fusee::proto
