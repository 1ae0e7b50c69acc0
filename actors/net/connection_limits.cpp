#include "actors/net/connection_limits.hpp"

namespace fusee::server {

std::optional<std::string> connection_limits::admit(const std::string& peer) {
  std::lock_guard lk{mu_};
  if (total_ >= max_total_) {
    count(limit::connections);
    return "this node already has " + std::to_string(total_) + " connections open " +
           (configured_ > max_total_
                ? "(limits.max_connections=" + std::to_string(configured_) + ", cut to " +
                      std::to_string(max_total_) +
                      " by the process's descriptor limit: raise it, see the start-up warning)"
                : std::string{"(limits.max_connections)"}) +
           ": try again later";
  }
  auto& mine = per_peer_[peer];
  if (mine >= max_per_peer_) {
    count(limit::connections_per_peer);
    return std::to_string(mine) + " connections from " + peer +
           " are open already (limits.max_connections_per_peer): close some, or share them";
  }
  ++mine;
  ++total_;
  return std::nullopt;
}

void connection_limits::release(const std::string& peer) {
  std::lock_guard lk{mu_};
  auto it = per_peer_.find(peer);
  if (it == per_peer_.end()) return;
  if (--it->second == 0) per_peer_.erase(it);
  --total_;
}

uint64_t connection_limits::open() const {
  std::lock_guard lk{mu_};
  return total_;
}

const char* connection_limits::name(limit l) {
  switch (l) {
  case limit::connections:
    return "connections";
  case limit::connections_per_peer:
    return "connections_per_peer";
  case limit::hello_timeout:
    return "hello_timeout";
  case limit::frame_timeout:
    return "frame_timeout";
  case limit::appends_in_flight:
    return "appends_in_flight";
  case limit::frame_size:
    return "frame_size";
  }
  return "unknown";
}

}  // namespace fusee::server
