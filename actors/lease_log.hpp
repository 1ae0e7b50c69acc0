// How the directory reaches the log: a lease grant and a revocation are log entries, made durable
// (grants) or ordered behind every record queued before them (revocations) before anyone hears of
// them. The log answers by message (grants_made, revocation_done in directory_interface.hpp).
// The wal_writer implements it; directory tests use a fake. No CAF here.
#pragma once

#include <cstdint>

#include "protocol/ids.hpp"

namespace fusee::server {

/// Identifies a worker or client connection inside the node; 0 = nobody.
using session_id = uint64_t;

class lease_log {
public:
  virtual ~lease_log() = default;
  /// Makes `session` the holder of `shard` under the next epoch; answered with `token`.
  virtual void grant(uint64_t token, session_id session, proto::shard_id shard) = 0;
  /// Ends the live lease of `shard` if it is still (`holder`, `epoch`) (holder 0: whoever holds
  /// it under `epoch`); answered with `token` once every record queued before it is durable or
  /// refused.
  virtual void revoke(uint64_t token, proto::shard_id shard, proto::epoch_t epoch,
                      session_id holder) = 0;
  /// The epoch last granted for `shard` before this start (recovered from disk).
  virtual proto::epoch_t recovered_epoch(proto::shard_id shard) const = 0;
};

}  // namespace fusee::server
