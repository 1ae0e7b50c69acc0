// The typed interfaces of the directory and of the sessions: one named message per request a
// session hands the directory, the log's answers, and what the directory tells a session. The
// compiler checks every message between them (one line per message below).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/invoker_interface.hpp"
#include "protocol/frame.hpp"
#include "protocol/wire.hpp"

namespace fusee::proto {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, frame& x) {
  return f(caf::meta::type_name("fusee.frame"), x.kind, x.body);
}

}  // namespace fusee::proto

namespace fusee::server {

/// What an I/O thread hands a session actor: the frames of one read that it does not handle
/// itself, in stream order, then perhaps the end of the stream.
struct inbound {
  std::vector<proto::frame> frames;
  int64_t read_at = 0;  ///< when the I/O thread had read them (actor clock ns)
  uint16_t bad = 0;     ///< an ERR code: the stream broke after `frames`, `why` says how
  std::string why;
  bool closed = false;     ///< the peer closed (or the socket failed) after `frames`
  int32_t read_error = 0;  ///< with `closed`: the errno of the read that failed (0: a clean end)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inbound& x) {
  return f(caf::meta::type_name("fusee.inbound"), x.frames, x.read_at, x.bad, x.why, x.closed,
           x.read_error);
}

/// A worker or client connection (a session actor), as the directory and the log's sink see it.
using session_actor = caf::typed_actor<
    caf::reacts_to<frame_atom, proto::bytes>,  ///< send this frame, in the connection's order
    caf::reacts_to<close_atom, proto::bytes>,  ///< send this last frame, then close
    caf::reacts_to<overflow_atom>,             ///< its lane went over the limit: end it
    caf::replies_to<stats_atom>::with<actor_stats>>;  ///< introspection

/// Where a request comes from: the connection, its request id, and the shard and epoch its head
/// names (no shard: 0xFFFFFFFF and 0). Answers go to `reply_to`.
struct origin {
  session_id session = 0;
  session_actor reply_to;
  uint64_t request = 0;
  uint32_t shard = 0xFFFFFFFFu;
  uint64_t epoch = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, origin& x) {
  return f(caf::meta::type_name("fusee.origin"), x.session, x.reply_to, x.request, x.shard,
           x.epoch);
}

/// HELLO from a worker: answered with LEASE (or ERR for an invocation that cannot be bound).
struct hello_request {
  origin from;
  uint32_t max_shards = 0;  ///< 0 = all
  bool serve_calls = false;
  uint64_t invocation = 0;  ///< an invoked worker's invocation; 0 = long-lived
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, hello_request& x) {
  return f(caf::meta::type_name("fusee.hello_request"), x.from, x.max_shards, x.serve_calls,
           x.invocation);
}

/// DRAIN: no more calls or messages to these shards; OK once the calls routed before it are
/// answered.
struct drain_request {
  origin from;
  std::vector<uint32_t> shards;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, drain_request& x) {
  return f(caf::meta::type_name("fusee.drain_request"), x.from, x.shards);
}

/// One IDLE entry: what the holder says about one of its shards, kept until its lease ends.
struct shard_report {
  uint32_t shard = 0;
  uint64_t epoch = 0;
  lease_end end;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_report& x) {
  return f(caf::meta::type_name("fusee.shard_report"), x.shard, x.epoch, x.end);
}

/// IDLE: answered with OK. Its timers count from `read_at`, when its frame was read (actor clock
/// ns; 0: when the directory has it), not from when a long report was decoded.
struct idle_request {
  origin from;
  std::vector<shard_report> reports;
  int64_t read_at = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, idle_request& x) {
  return f(caf::meta::type_name("fusee.idle_request"), x.from, x.reports, x.read_at);
}

/// CALL from a client for `from.shard`: answered with CALL_RESULT.
struct call_request {
  origin from;
  std::string method;
  std::string type;
  proto::bytes args;
  uint32_t park_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_request& x) {
  return f(caf::meta::type_name("fusee.call_request"), x.from, x.method, x.type, x.args, x.park_ms);
}

/// CALL_REPLY from a holder.
struct call_reply_request {
  origin from;
  uint64_t relay = 0;
  bool ok = false;
  proto::bytes body;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_reply_request& x) {
  return f(caf::meta::type_name("fusee.call_reply_request"), x.from, x.relay, x.ok, x.body);
}

/// RELAY: a message from `from.shard` to `target`.
struct relay_request {
  origin from;
  uint32_t target = 0;
  uint64_t outbox_id = 0;
  proto::bytes payload;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, relay_request& x) {
  return f(caf::meta::type_name("fusee.relay_request"), x.from, x.target, x.outbox_id, x.payload);
}

/// MESSAGE_ACK from the target's holder: ACK to the sender's lease if it still holds `sender`.
struct ack_request {
  origin from;
  uint32_t sender = 0;
  uint64_t sender_epoch = 0;
  uint64_t outbox_id = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ack_request& x) {
  return f(caf::meta::type_name("fusee.ack_request"), x.from, x.sender, x.sender_epoch,
           x.outbox_id);
}

/// RELEASE of `from.shard`: OK once the revocation is through the log.
struct release_request {
  origin from;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, release_request& x) {
  return f(caf::meta::type_name("fusee.release_request"), x.from);
}

/// A worker connection ended (`silent`: its liveness timeout; the directory sends the REVOKED
/// frame with close_atom, the session closes). Its leases end.
struct session_ended {
  session_id session = 0;
  bool silent = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, session_ended& x) {
  return f(caf::meta::type_name("fusee.session_ended"), x.session, x.silent);
}

/// The grants of one log batch.
struct grants_made {
  std::vector<grant_done> grants;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grants_made& x) {
  return f(caf::meta::type_name("fusee.grants_made"), x.grants);
}

/// The log failed (a write, fdatasync or roll; its message): it grants nothing until restart.
struct log_failed {
  std::string failure;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, log_failed& x) {
  return f(caf::meta::type_name("fusee.log_failed"), x.failure);
}

/// The revocations of one log batch: each is through the log, or, with a `failure`, the log failed
/// (in this batch or before: broken until restart, the shards get no new holder).
struct revocations_done {
  std::vector<revocation_done> revoked;
  std::string failure;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, revocations_done& x) {
  return f(caf::meta::type_name("fusee.revocations_done"), x.revoked, x.failure);
}

/// The invoker is up (from the server's start): the scheduler to bind invocations with, and the
/// wake records the directory tells of leases, work and reports. Local only (it holds the records'
/// registry).
struct invoker_ready {
  binder_actor scheduler;
  std::shared_ptr<wake_records> records;
};

/// The directory's own timer: a parked call's wait is over.
struct call_expired {
  uint32_t shard = 0;
  uint64_t seq = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, call_expired& x) {
  return f(caf::meta::type_name("fusee.call_expired"), x.shard, x.seq);
}

/// A message from a shard of one node to a shard another node serves (a RELAY crossing nodes):
/// the target's node delivers it to the target's holder or parks it, as for its own RELAYs.
struct remote_message {
  uint32_t target = 0;
  uint32_t from = 0;
  uint64_t from_epoch = 0;
  uint64_t outbox_id = 0;
  proto::bytes payload;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, remote_message& x) {
  return f(caf::meta::type_name("fusee.remote_message"), x.target, x.from, x.from_epoch,
           x.outbox_id, x.payload);
}

/// A MESSAGE_ACK for a sender another node serves: that node pushes ACK to the sender's lease
/// if `sender_epoch` still holds it.
struct remote_ack {
  uint32_t sender = 0;
  uint64_t sender_epoch = 0;
  uint64_t outbox_id = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, remote_ack& x) {
  return f(caf::meta::type_name("fusee.remote_ack"), x.sender, x.sender_epoch, x.outbox_id);
}

/// Where the directory sends what belongs to another node's shards (the cluster actor,
/// actors/cluster/): CALLs, messages and acks. Each is answered or delivered by the owner.
using forwarder_actor = caf::typed_actor<caf::reacts_to<call_request>,    ///< a CALL
                                         caf::reacts_to<remote_message>,  ///< a RELAY
                                         caf::reacts_to<remote_ack>>;     ///< a MESSAGE_ACK

/// At start, before any session: the node is part of a cluster and `forwarder` reaches the
/// other nodes.
struct cluster_ready {
  forwarder_actor forwarder;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_ready& x) {
  return f(caf::meta::type_name("fusee.cluster_ready"), x.forwarder);
}

/// The directory: leases (holder, epoch), the standby order, and the routing of calls and
/// messages to holders. Lease changes go through the log first (lease_log.hpp).
using directory_actor = fence_actor::extend<
    caf::reacts_to<hello_request>,       ///< HELLO from a worker
    caf::reacts_to<drain_request>,       ///< DRAIN
    caf::reacts_to<idle_request>,        ///< IDLE
    caf::reacts_to<call_request>,        ///< CALL from a client
    caf::reacts_to<call_reply_request>,  ///< CALL_REPLY from a holder
    caf::reacts_to<relay_request>,       ///< RELAY
    caf::reacts_to<ack_request>,         ///< MESSAGE_ACK
    caf::reacts_to<release_request>,     ///< RELEASE
    caf::reacts_to<session_ended>,       ///< a worker connection ended or fell silent
    caf::reacts_to<grants_made>,         ///< from the log
    caf::reacts_to<revocations_done>,    ///< from the log
    caf::reacts_to<log_failed>,          ///< from the log, once: it failed
    caf::reacts_to<invoker_ready>,       ///< once, at start, when endpoints are configured
    caf::reacts_to<call_expired>,        ///< own timer
    caf::reacts_to<retire_atom>,         ///< own timer: wake records that were quiet rest
    caf::reacts_to<cluster_ready>,       ///< once, at start, in a cluster
    caf::reacts_to<withheld_shards>,     ///< from the cluster actor: lease these to nobody
    caf::reacts_to<remote_message>,      ///< a message from another node's shard
    caf::reacts_to<remote_ack>,          ///< an ack for a sender on this node
    caf::replies_to<parked_atom>::with<uint64_t>,    ///< calls parked now (/v1/invoker)
    caf::replies_to<stats_atom>::with<actor_stats>,  ///< introspection
    /// A byte per shard of [from, to] (clamped; lease_mark_of), for the inspector's states: no
    /// message per shard, and no view of 40 bytes each.
    caf::replies_to<view_atom, uint32_t, uint32_t>::with<std::string>,
    /// The full views of a few shards and the shards a few sessions hold (the inspector's page).
    caf::replies_to<shard_details_request>::with<lease_details>>;

}  // namespace fusee::server

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(fusee::server::invoker_ready)
