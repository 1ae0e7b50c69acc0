// Per-shard checkpoint files (format.hpp): one blob per shard, replaced atomically and durably.
// Blocking: the log's committing thread (the writer thread or an I/O thread) and start-up only.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "actors/wal/file_io.hpp"
#include "actors/wal/format.hpp"

namespace fusee::server::wal {

class checkpoint_store {
public:
  explicit checkpoint_store(fs::path dir) : dir_(std::move(dir)) {}

  /// Replaces the shard's checkpoint; durable when it returns.
  proto::result<void> write(uint32_t shard, uint64_t lsn, byte_view data) const;
  /// The shard's checkpoint, or nothing if it has none; a damaged file is an error naming it.
  proto::result<std::optional<checkpoint_file>> read(uint32_t shard) const;
  /// The shards below `shards` that have a checkpoint file (one listing of the directory, not a
  /// look-up per shard: a million shards start in a fraction of a second).
  proto::result<std::vector<uint32_t>> stored(uint32_t shards) const;

  fs::path path(uint32_t shard) const;

private:
  fs::path dir_;
};

}  // namespace fusee::server::wal
