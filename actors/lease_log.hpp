// How the directory reaches the log: a lease grant and a revocation are log entries, made durable
// (grants: the shard's durable LSN, and an epoch within the reservation on disk) or ordered behind
// every record queued before them (revocations) before anyone hears of them. The log answers by
// message (grants_made, revocations_done in directory_interface.hpp). The wal_writer implements it;
// directory tests use a fake. No CAF here (grant_done's and revocation_done's inspect() are
// templates CAF instantiates; their names are given where they are registered).
#pragma once

#include <cstdint>
#include <vector>

#include "protocol/ids.hpp"

namespace fusee::server {

/// Identifies a worker or client connection inside the node; 0 = nobody.
using session_id = uint64_t;

/// A lease grant the log made durable (epoch 0: it could not), as the log reports it and the
/// directory receives it.
struct grant_done {
  uint64_t token = 0;
  session_id session = 0;
  uint32_t shard = 0;
  uint64_t epoch = 0;
  uint64_t durable_lsn = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grant_done& x) {
  return f(x.token, x.session, x.shard, x.epoch, x.durable_lsn);
}

/// A lease to end, as the directory asks the log to (lease_log::revoke) and the log queues it
/// (wal_revoke).
struct revocation {
  uint64_t token = 0;
  proto::shard_id shard;
  proto::epoch_t epoch;
  session_id holder = 0;
};

/// A revocation the log ordered: everything queued before it is durable or refused. Reported in
/// batches, as the log reports them and the directory receives them.
struct revocation_done {
  uint64_t token = 0;
  uint32_t shard = 0;
  /// A record was appended under the revoked lease (a checkpoint, load or read is none); true
  /// when the lease was not the shard's last grant (not known).
  bool wrote = true;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, revocation_done& x) {
  return f(x.token, x.shard, x.wrote);
}

class lease_log {
public:
  virtual ~lease_log() = default;
  /// Makes `session` the holder of `shard` under the next epoch; answered with `token`.
  virtual void grant(uint64_t token, session_id session, proto::shard_id shard) = 0;
  /// The same grant made now, on the calling thread, if it needs nothing written and the log is
  /// idle: answered as grant() is, before this returns. False: nothing was done (call grant()).
  /// Each such grant is answered on its own, so the directory asks it only of the first grant of
  /// a burst; the rest go through the queue and are answered together.
  virtual bool grant_at_once(uint64_t, session_id, proto::shard_id) { return false; }
  /// Ends the live lease of each `shard` if it is still (`holder`, `epoch`) (holder 0: whoever
  /// holds it under `epoch`); each answered with its `token` once every record queued before it
  /// is durable or refused, in order. Queued before this returns (a chunk of them at a time: a
  /// worker that leaves with a million leases is a few hundred queueings, not a million). Once a
  /// write failed (in the revocation's batch or before), it is answered with the log's failure:
  /// the log is broken until restart, so the shard gets no new holder (nor does a grant the log
  /// could not make: epoch 0).
  virtual void revoke(std::vector<revocation> revocations) = 0;
  /// The last epoch that may have been granted for `shard` before this start (recovered from
  /// disk: any epoch up to it is stale now).
  virtual proto::epoch_t recovered_epoch(proto::shard_id shard) const = 0;
};

}  // namespace fusee::server
