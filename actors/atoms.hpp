// The atoms of the server's actor interfaces: one meaning each. Messages with content are named
// structs in the interface headers (directory_interface.hpp, invoker_interface.hpp); every type
// that crosses an actor boundary is registered once, in add_server_types() (message_types.hpp).
// Include only from actor translation units: it pulls in CAF.
#pragma once

#include <caf/all.hpp>

namespace fusee::server {

// sessions
using frame_atom = caf::atom_constant<caf::atom("frame")>;  ///< send this frame
using close_atom = caf::atom_constant<caf::atom("close")>;  ///< send this last frame and close
/// The connection's out_lane went over its limit (the peer stopped reading): end it.
using overflow_atom = caf::atom_constant<caf::atom("overflow")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;  ///< an actor's own timer
/// A session checks its handshake and partial-frame deadlines (limits.hello_timeout_ms, ...).
using deadline_atom = caf::atom_constant<caf::atom("deadline")>;
// directory
using parked_atom = caf::atom_constant<caf::atom("parked")>;  ///< how many calls are parked?
// invoker
using due_atom = caf::atom_constant<caf::atom("due")>;        ///< work arrived for a shard
using undue_atom = caf::atom_constant<caf::atom("undue")>;    ///< what waited for a shard is gone
using leased_atom = caf::atom_constant<caf::atom("leased")>;  ///< a worker holds the shard
using invoke_atom = caf::atom_constant<caf::atom("invoke")>;  ///< send this invocation's POST
using fencelater_atom = caf::atom_constant<caf::atom("fencelater")>;  ///< close grace is over
using gather_atom = caf::atom_constant<caf::atom("gather")>;          ///< the gather window is over
/// The log failed (no lease can be granted until restart): send no invocation more.
using halt_atom = caf::atom_constant<caf::atom("halt")>;
/// A wake record: hand over your state and end (if you can rest); the directory: retire the
/// records nobody told anything for a while (its own timer).
using retire_atom = caf::atom_constant<caf::atom("retire")>;
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;  ///< your part of /v1/invoker
// introspection (actors/inspect/)
using stats_atom = caf::atom_constant<caf::atom("stats")>;  ///< answer with your actor_stats
using view_atom = caf::atom_constant<caf::atom("view")>;    ///< your view of a range of shards
using endpoints_atom = caf::atom_constant<caf::atom("endpoints")>;  ///< your endpoint actors

}  // namespace fusee::server
