// What a clustered node withholds, decided from what it has heard of its peers (DESIGN.md §7, "a
// different map"): every shard it serves until each peer was heard once since start, and the
// shards a peer's different map gives to another node while that peer serves it. No actor, no
// clock (callers pass the time): the cluster actor logs the changes and tells the directory.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/cluster/withheld.hpp"
#include "actors/node_settings.hpp"

namespace fusee::server {

class map_agreement {
public:
  using time_point = std::chrono::steady_clock::time_point;

  /// Outside a cluster: nothing is ever withheld.
  map_agreement() = default;
  /// For the node `cfg` names in its map: every shard it serves withheld until each peer was
  /// heard (nothing in a cluster of one).
  explicit map_agreement(const node_settings& cfg);

  /// Peer `i` (its index in the map) was heard: linked, refused, or refusing this node. True if
  /// that ended the start's hold.
  bool heard(size_t i);
  /// A dial of peer `i` failed; `reached`: its port had answered (a later step failed). A port
  /// not answering counts as heard at once; a failure after reaching it only once the peer
  /// timeout has passed since the first such failure, so one more dial may find its map. True if
  /// that ended the start's hold (never once it has ended).
  bool dial_failed(size_t i, bool reached, time_point now);
  /// Every peer was heard since start.
  bool settled() const { return settled_; }

  /// This node's shards that a node serving another map gives to another node.
  struct contest {
    std::vector<proto::shard_range> shards;  ///< never empty while kept
    std::string digest;                      ///< of its map
  };
  enum class change { none, withheld, cleared };
  struct outcome {
    change what = change::none;
    std::string unreadable;  ///< why its map could not be read ("" if it could): all withheld
    std::vector<proto::shard_range> given_back;  ///< `cleared`: what its contest had withheld
  };
  /// Node `name` (possibly one this map does not name) serves the map `canonical` (`digest`: ""
  /// to work it out from it), not ours: its contest becomes the shards ours gives this node and
  /// its gives another, or every shard of this node if its map cannot be read. `withheld`: the
  /// contest is new or other than before (other shards or another digest); `cleared`: it
  /// contests nothing now.
  outcome contested_by(const std::string& name, const std::string& digest,
                       const std::string& canonical);
  /// Node `name` serves this node's map (again): the shards its contest withheld, now given
  /// back, or nullopt if it had none.
  std::optional<std::vector<proto::shard_range>> agreed_with(const std::string& name);
  /// The contests by node name.
  const std::map<std::string, contest>& contests() const { return contests_; }
  /// Peer `name` is linked to another process as this node (`yes`), or took this one (`!yes`):
  /// while any peer is, this process is not the node its map describes and withholds every
  /// shard of it (calls fail at once). True if that changed what is withheld.
  bool shadowed(const std::string& name, bool yes);
  /// A peer is linked to another process as this node now.
  bool shadowed_now() const { return !shadowed_by_.empty(); }

  /// Everything withheld now: each contest (calls for it fail at once) before the start's hold.
  withheld_shards withheld_now() const;
  /// withheld_now() if it differs from what the directory was last told (it starts told the
  /// start's hold), and from now on counts as told; else nullopt.
  std::optional<withheld_shards> to_tell();

private:
  proto::cluster_map map_;  ///< this node's
  std::string self_name_;
  size_t self_ = 0;  ///< this node's index in map_
  std::chrono::milliseconds peer_timeout_{0};
  withheld_shards start_hold_;  ///< every shard this node serves (empty alone or outside a cluster)
  bool settled_ = true;         ///< every peer heard since start: start_hold_ no longer withheld
  std::vector<bool> heard_;     ///< by index in the map
  /// By index in the map: when a dial that reached the peer's port first failed.
  std::vector<std::optional<time_point>> reached_failure_;
  std::map<std::string, contest> contests_;  ///< by node name; none with empty `shards`
  std::set<std::string> shadowed_by_;        ///< peers linked to another process as this node
  withheld_shards told_;                     ///< what the directory was last told
};

}  // namespace fusee::server
