#include "actors/cluster/withheld.hpp"

namespace fusee::server {

withheld_shards starting_hold(const shard_owners& owners) {
  withheld_shards w;
  if (owners.nodes().size() < 2) return w;
  withheld part;
  // What the map gives this node and no map gives anybody: every shard it serves.
  part.ranges = proto::contested_shards({owners.nodes()}, owners.self_name(), {});
  part.why = "node " + owners.self_name() +
             " has not yet heard from every node of its cluster since it started";
  w.parts.push_back(std::move(part));
  return w;
}

std::vector<bool> withheld_bits(const withheld_shards& w, size_t shards) {
  std::vector<bool> bits(shards);
  for (auto& part : w.parts)
    for (auto r : part.ranges)
      for (uint64_t s = r.first; s <= r.last && s < shards; ++s)
        bits[s] = true;
  return bits;
}

const withheld* withholding(const withheld_shards& w, uint32_t shard) {
  for (auto& part : w.parts)
    for (auto r : part.ranges)
      if (shard >= r.first && shard <= r.last) return &part;
  return nullptr;
}

}  // namespace fusee::server
