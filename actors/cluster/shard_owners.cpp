#include "actors/cluster/shard_owners.hpp"

#include <algorithm>

namespace fusee::server {

shard_owners::shard_owners(const node_settings& cfg) {
  if (!cfg.clustered) return;
  map_frame_ = proto::make_cluster_map_frame(0, &cfg.cluster, cfg.cluster_node);
  nodes_ = cfg.cluster.nodes;
  self_ = index_of(cfg.cluster_node).value_or(0);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    for (auto& r : nodes_[n].shards)
      ranges_.push_back(owned_range{r.first, r.last, n});
  }
  for (auto& r : nodes_[self_].shards)
    own_count_ += uint64_t{r.last} - r.first + 1;
  std::sort(ranges_.begin(), ranges_.end(),
            [](const owned_range& a, const owned_range& b) { return a.first < b.first; });
}

std::optional<size_t> shard_owners::owner_index(uint32_t shard) const {
  // The last range starting at or before `shard`.
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), shard,
                             [](uint32_t s, const owned_range& r) { return s < r.first; });
  if (it == ranges_.begin()) return std::nullopt;
  --it;
  if (shard > it->last) return std::nullopt;
  return it->node;
}

std::optional<size_t> shard_owners::index_of(const std::string& name) const {
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].name == name) return i;
  return std::nullopt;
}

const std::string& shard_owners::self_name() const {
  static const std::string none;
  return nodes_.empty() ? none : nodes_[self_].name;
}

std::string shard_owners::describe(size_t node) const {
  if (node >= nodes_.size()) return "this node";
  return "node " + nodes_[node].name + " (workers " + nodes_[node].listen + ")";
}

std::optional<proto::error> shard_owners::refuse_foreign(uint32_t shard) const {
  if (ranges_.empty()) return std::nullopt;
  auto owner = owner_index(shard);
  if (!owner || *owner == self_) return std::nullopt;
  return proto::error{proto::err_code::not_holder,
                      "shard " + std::to_string(shard) + " is served by " + describe(*owner) +
                          ", not by node " + nodes_[self_].name + ": connect there"};
}

}  // namespace fusee::server
