// One worker or client TCP connection: the I/O threads read it (io_loop) and hand the log's
// requests (APPEND, RECOVER_LOG, CHECKPOINT, LOAD_CHECKPOINT) straight to the log, CALL and
// CALL_REPLY straight to the directory, and answer PING themselves once the connection has said
// HELLO; every other frame, and everything before HELLO, goes to the connection's session actor:
// the HELLO handshake, AUTH, liveness, and the hand-off of leases and messages to the directory.
// Every frame it sends goes through the connection's out_lane, which owns the write order.
#pragma once

#include <memory>

#include "actors/cluster/shard_owners.hpp"
#include "actors/directory_interface.hpp"
#include "actors/node_settings.hpp"
#include "protocol/wire.hpp"

namespace fusee::server {

class wal_writer;
class log_sink;
class token_store;
class connection_limits;
class io_loop;

/// What every session of a node shares.
struct session_context {
  std::shared_ptr<const node_settings> settings;  ///< shards, liveness, write_buffer_mb
  directory_actor directory;
  wal_writer* wal = nullptr;
  log_sink* sink = nullptr;                    ///< the sessions register their out_lanes with it
  std::shared_ptr<const shard_owners> owners;  ///< requests for other nodes' shards are refused
  /// Null or empty: any peer may connect; otherwise each must prove a token first (AUTH).
  std::shared_ptr<token_store> tokens;
  /// Counts connections per peer; a session releases its own. Null: no counting.
  std::shared_ptr<connection_limits> limits;
  io_loop* loop = nullptr;  ///< reads the connections
};

/// A fresh id for a session (or a socket-less stand-in such as the HTTP API's call gateway).
session_id new_session_id();

/// Who is at the other end of an accepted socket.
struct peer_info {
  std::string ip;        ///< the address ctx.limits admitted it under
  std::string address;   ///< host:port; empty: asked of the socket (not a TLS socketpair)
  proto::bytes binding;  ///< the TLS exporter value token proofs are bound to; empty: no TLS
};

/// Starts the session of the accepted socket `fd` (which it takes; `spare`, if not -1, is a
/// descriptor its writes may use): its actor, and its reading by ctx.loop. Any thread. False (the
/// socket closed) if it cannot be served: out of descriptors.
bool start_session(caf::actor_system& sys, int fd, peer_info peer, const session_context& ctx,
                   int spare = -1);

}  // namespace fusee::server
