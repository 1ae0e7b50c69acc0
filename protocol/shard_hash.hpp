// Workflow id -> shard (PROTOCOL.md §9): fnv1a64(utf8(id)) mod shard_count.
#pragma once

#include <cstdint>
#include <string_view>

#include "protocol/ids.hpp"

namespace fusee::proto {

constexpr uint64_t fnv1a64(std::string_view data) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : data) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

/// The shard that owns `workflow_id`. `shard_count` must be at least 1.
constexpr shard_id shard_for(std::string_view workflow_id, uint32_t shard_count) {
  return shard_id{static_cast<uint32_t>(fnv1a64(workflow_id) % shard_count)};
}

}  // namespace fusee::proto
