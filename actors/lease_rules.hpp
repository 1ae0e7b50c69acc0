// The one rule for refusing a shard request (PROTOCOL.md §3), shared by the log and the directory.
#pragma once

#include <optional>
#include <string>

#include "protocol/errors.hpp"
#include "protocol/ids.hpp"

namespace fusee::server {

/// `current` is the shard's last granted epoch, `live` whether that lease is still held, and
/// `mine` whether the asking connection holds it. Nothing if (epoch, connection) is the live lease;
/// STALE_EPOCH if that epoch was granted but is no longer live; NOT_HOLDER otherwise.
inline std::optional<proto::error> refuse_shard_request(uint32_t shard, proto::epoch_t asked,
                                                        proto::epoch_t current, bool live,
                                                        bool mine) {
  if (live && mine && asked == current) return std::nullopt;
  bool was_granted = asked.value() >= 1 && asked <= current;
  bool live_elsewhere = asked == current && live;
  if (was_granted && !live_elsewhere)
    return proto::error{proto::err_code::stale_epoch, "shard " + std::to_string(shard) + " epoch " +
                                                          std::to_string(asked.value()) +
                                                          " is no longer live (current epoch " +
                                                          std::to_string(current.value()) + ")"};
  return proto::error{proto::err_code::not_holder, "this connection does not hold shard " +
                                                       std::to_string(shard) + " under epoch " +
                                                       std::to_string(asked.value())};
}

/// A shard request for a shard this server does not have: not held (PROTOCOL.md §3), so
/// NOT_HOLDER, and the connection stays open.
inline proto::error unknown_shard(uint32_t shard, size_t shard_count) {
  return proto::error{proto::err_code::not_holder, "no shard " + std::to_string(shard) +
                                                       " (this server has " +
                                                       std::to_string(shard_count) + ")"};
}

}  // namespace fusee::server
