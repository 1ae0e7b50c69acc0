// The node's links to the other nodes of its cluster (DESIGN.md §7): one actor that dials every
// peer's cluster actor over CAF's middleman (the connect runs on the middleman's own thread,
// never a scheduler thread), compares maps (a peer with a different digest is refused and the
// difference logged), watches the links (middleman heartbeats; a lost link is a down_msg) and
// dials again with backoff. It forwards what belongs to another node's shards: CALLs (answered
// back through it to the client's session; failed at once, naming the node, while that node is
// not up, and with "may have run" when it goes down with the call in flight), messages and
// acks (messages for a node that is not up are held, a bounded number, and sent when it is;
// acks and messages past the bound are dropped: senders resend until acknowledged, receivers
// deduplicate, so each arrives once). Everything a peer sends for this node's shards goes to the
// directory as if it came from a session.
#pragma once

#include <map>
#include <string>

#include "actors/cluster/cluster_interface.hpp"
#include "actors/node_settings.hpp"

namespace fusee::server {

/// Spawns the cluster actor of a node with `[cluster]`. The caller publishes it on
/// `cluster_listen` (or behind a TLS listener there), sends it this node's inspector
/// (caf::put_atom, strong_actor_ptr) when there is one, and then `dial_atom`: only then does it
/// dial its peers, each at its map `cluster` address or, when `dial_via` names the peer, there (a
/// loopback TLS tunnel to it). Published first, so that of two nodes starting together the one
/// that dials second always reaches the first (a node finds a peer's different map before it
/// leases anything: withheld.hpp).
cluster_actor spawn_cluster(caf::actor_system& sys, const node_settings& cfg,
                            directory_actor directory,
                            std::map<std::string, std::string> dial_via = {});

}  // namespace fusee::server
