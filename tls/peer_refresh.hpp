// The cluster's other nodes looked up again while the node runs: on a thread of its own (DNS
// blocks, never on a CAF thread), every period, each node's `cluster` host is resolved and the
// addresses it gained are given to the terminator's known peers, so a node restarted at a new
// address (a container's, a DHCP lease's) keeps its places on the nodes that were running; the
// addresses it lost are taken back (unless another node's host has them), so whoever gets them
// next is a stranger. A lookup that finds nothing changes nothing; one that finds addresses of
// one family while the other's lookup failed keeps what the node had of that family.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tls/terminator.hpp"
#include "tls/tunnel.hpp"

namespace fusee::tls {

class peer_refresh {
public:
  struct peer {
    std::string name, host;
    std::vector<std::string> had;  ///< the addresses it is known by (at start: the first lookup)
  };
  using resolver = std::function<host_lookup(const std::string& host)>;  ///< as look_up()

  /// Starts the thread; `via` outlives this. A node gaining addresses gets `places` of its own
  /// if it had none (its host did not resolve at start). `resolve` may still be running after
  /// this is destroyed: it must own what it uses.
  peer_refresh(terminator& via, std::vector<peer> peers, uint32_t places,
               std::chrono::milliseconds period, resolver resolve);
  /// Stops the thread without waiting for a lookup going on (a DNS server that does not answer
  /// must not hold up the node's stop): from here on it touches nothing of the terminator's.
  ~peer_refresh();
  peer_refresh(const peer_refresh&) = delete;
  peer_refresh& operator=(const peer_refresh&) = delete;

  struct state;

private:
  std::shared_ptr<state> st_;  ///< shared with the thread, which may outlive this
};

}  // namespace fusee::tls
