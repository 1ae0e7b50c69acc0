#include "actors/cluster/map_agreement.hpp"

#include "actors/cluster/shard_owners.hpp"

namespace fusee::server {

map_agreement::map_agreement(const node_settings& cfg)
    : map_(cfg.cluster), self_name_(cfg.cluster_node), peer_timeout_(cfg.cluster_peer_timeout_ms) {
  shard_owners owners(cfg);
  self_ = owners.self();
  start_hold_ = starting_hold(owners);
  settled_ = start_hold_.parts.empty();
  told_ = start_hold_;
  heard_.assign(map_.nodes.size(), false);
  reached_failure_.resize(map_.nodes.size());
}

bool map_agreement::heard(size_t i) {
  if (i < heard_.size()) heard_[i] = true;
  if (settled_) return false;
  for (size_t j = 0; j < heard_.size(); ++j)
    if (j != self_ && !heard_[j]) return false;
  settled_ = true;
  return true;
}

bool map_agreement::dial_failed(size_t i, bool reached, time_point now) {
  if (i >= reached_failure_.size()) return false;
  auto& first = reached_failure_[i];
  if (reached && !first) first = now;
  if (reached && now - *first < peer_timeout_) return false;
  return heard(i);
}

map_agreement::outcome map_agreement::contested_by(const std::string& name,
                                                   const std::string& digest,
                                                   const std::string& canonical) {
  outcome out;
  auto theirs = proto::parse_canonical(canonical);
  if (!theirs) out.unreadable = theirs.err().message;
  contest c{proto::contested_shards(map_, self_name_, theirs ? *theirs : proto::cluster_map{}),
            !digest.empty() ? digest
            : theirs        ? theirs->digest()
                            : "(unreadable)"};
  auto old = contests_.find(name);
  if (old != contests_.end() && old->second.shards == c.shards && old->second.digest == c.digest)
    return out;
  if (c.shards.empty()) {  // as if it agreed
    if (auto back = agreed_with(name)) {
      out.given_back = std::move(*back);
      out.what = change::cleared;
    }
    return out;
  }
  contests_[name] = std::move(c);
  out.what = change::withheld;
  return out;
}

std::optional<std::vector<proto::shard_range>> map_agreement::agreed_with(const std::string& name) {
  auto c = contests_.find(name);
  if (c == contests_.end()) return std::nullopt;
  auto shards = std::move(c->second.shards);
  contests_.erase(c);
  return shards;
}

bool map_agreement::shadowed(const std::string& name, bool yes) {
  return yes ? shadowed_by_.insert(name).second : shadowed_by_.erase(name) > 0;
}

withheld_shards map_agreement::withheld_now() const {
  withheld_shards w;
  if (!shadowed_by_.empty()) {
    // Every shard of this node: start_hold_'s ranges, whether or not the start's hold is over.
    for (auto& part : start_hold_.parts)
      w.parts.push_back(withheld{part.ranges,
                                 "node " + *shadowed_by_.begin() +
                                     " is linked to another process as node " + self_name_ +
                                     " (at the map's address for it): this process is not taken "
                                     "for node " +
                                     self_name_ +
                                     " and leases none of its shards while that holds (two "
                                     "processes configured as node " +
                                     self_name_ + "?)",
                                 true});
    return w;
  }
  for (auto& [name, c] : contests_)
    w.parts.push_back(withheld{c.shards,
                               "node " + name + " serves a different cluster map (digest " +
                                   c.digest.substr(0, 12) + "), which gives shard(s) " +
                                   proto::format_shard_ranges(c.shards) +
                                   " to another node: node " + self_name_ +
                                   " leases them to no worker until both serve the same map",
                               true});
  if (!settled_)
    for (auto& part : start_hold_.parts)
      w.parts.push_back(part);
  return w;
}

std::optional<withheld_shards> map_agreement::to_tell() {
  auto w = withheld_now();
  if (w == told_) return std::nullopt;
  told_ = w;
  return w;
}

}  // namespace fusee::server
