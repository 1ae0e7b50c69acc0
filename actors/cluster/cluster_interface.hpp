// The typed interface between the nodes of a cluster (DESIGN.md §7): each node publishes one
// cluster actor on `cluster_listen`; the others dial it over CAF's middleman, introduce
// themselves (peer_hello: a different map is refused) and then send it what belongs to its
// shards. One line per message below.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "actors/directory_interface.hpp"
#include "actors/inspect/stats.hpp"

namespace fusee::server {

using members_atom = caf::atom_constant<caf::atom("members")>;  ///< the nodes, as seen here
using dial_atom = caf::atom_constant<caf::atom("dial")>;        ///< own timer: dial a peer
using probe_atom = caf::atom_constant<caf::atom("probe")>;      ///< a peer's port answered?
using rehello_atom = caf::atom_constant<caf::atom("rehello")>;  ///< introduce this node again

/// The first request on a link: who dials, and the map it serves.
struct peer_hello {
  std::string node;
  std::string digest;     ///< cluster_map::digest()
  std::string canonical;  ///< cluster_map::canonical(), to log the difference
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_hello& x) {
  return f(caf::meta::type_name("fusee.peer_hello"), x.node, x.digest, x.canonical);
}

/// The answer: empty `refusal` = the link is up; `inspector` is the node's inspector (for
/// `fusee inspect --cluster`); `canonical` its map when the maps differ (to find the shards both
/// claim: withheld.hpp).
/// `shadowed`: refused because this node is linked to another process as the dialling node (at
/// the map's address for it): the dialler is not that node and withholds its shards.
struct peer_welcome {
  std::string node;
  std::string refusal;
  caf::strong_actor_ptr inspector;
  std::string canonical;
  bool shadowed = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, peer_welcome& x) {
  return f(caf::meta::type_name("fusee.peer_welcome"), x.node, x.refusal, x.inspector, x.canonical,
           x.shadowed);
}

/// One node as this node sees it (/v1/cluster, `fusee inspect --cluster`).
struct cluster_member {
  std::string name;
  std::string cluster;             ///< its middleman's address
  std::string listen;              ///< workers and clients
  std::string http;                ///< its HTTP API
  std::string shards;              ///< "0-7, 12"
  std::string state;               ///< "self", "up", "connecting", "down" or "refused"
  std::string error;               ///< why it is not up
  int64_t since_ms = 0;            ///< unix ms of the last change of state
  uint64_t calls_forwarded = 0;    ///< CALLs this node forwarded to it
  uint64_t calls_failed_fast = 0;  ///< CALLs answered at once because it was not up
  uint64_t messages_forwarded = 0;
  caf::strong_actor_ptr inspector;  ///< while up (and for this node)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_member& x) {
  return f(caf::meta::type_name("fusee.cluster_member"), x.name, x.cluster, x.listen, x.http,
           x.shards, x.state, x.error, x.since_ms, x.calls_forwarded, x.calls_failed_fast,
           x.messages_forwarded, x.inspector);
}

/// One node's part of a cluster-wide inspection: how this node sees it and, when its inspector
/// answered, its reply to the query.
struct node_report {
  cluster_member member;
  bool answered = false;
  std::string error;  ///< why there is no reply
  inspect_reply reply;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, node_report& x) {
  return f(caf::meta::type_name("fusee.node_report"), x.member, x.answered, x.error, x.reply);
}

/// `fusee inspect --cluster` and /v1/cluster: every node of the map, in the map's order.
struct cluster_reply {
  std::vector<node_report> nodes;
  uint64_t took_us = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, cluster_reply& x) {
  return f(caf::meta::type_name("fusee.cluster_reply"), x.nodes, x.took_us);
}

/// The cluster actor: what a peer or this node's directory sends it (routed by who serves the
/// shard: its own go to the directory, the others to their node), the answers of forwarded
/// CALLs (session_actor: CALL_RESULT frames), the handshake, and its own timers.
using cluster_actor = session_actor::extend_with<forwarder_actor>::extend<
    caf::replies_to<peer_hello>::with<peer_welcome>,                   ///< a peer dialled this node
    caf::replies_to<members_atom>::with<std::vector<cluster_member>>,  ///< introspection
    caf::reacts_to<caf::put_atom, caf::strong_actor_ptr>,  ///< this node's inspector, at start
    caf::reacts_to<dial_atom>,  ///< once, after it is published: dial every peer now
    caf::reacts_to<dial_atom, uint32_t, uint64_t>,      ///< own timer: dial peer i (generation)
    caf::reacts_to<probe_atom, uint32_t, std::string>,  ///< peer i's probe: "" or why not
    caf::reacts_to<rehello_atom, uint32_t, uint64_t>,   ///< own timer: hello again to peer i
    caf::reacts_to<tick_atom>>;  ///< own timer: forwarded calls past their deadline

}  // namespace fusee::server
