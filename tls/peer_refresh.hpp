// The cluster's other nodes looked up again while the node runs: on a thread of its own (DNS
// blocks, never on a CAF thread), every period, each node's `cluster` host is resolved and the
// addresses it gained are given to the terminator's known peers, so a node restarted at a new
// address (a container's, a DHCP lease's) keeps its places on the nodes that were running.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tls/terminator.hpp"

namespace fusee::tls {

class peer_refresh {
public:
  struct peer {
    std::string name, host;
    std::vector<std::string> had;  ///< the addresses it was known by at start
  };
  using resolver = std::function<std::vector<std::string>(const std::string& host)>;

  /// Starts the thread; `via` outlives this. A node gaining addresses gets `places` of its own
  /// if it had none (its host did not resolve at start).
  peer_refresh(terminator& via, std::vector<peer> peers, uint32_t places,
               std::chrono::milliseconds period, resolver resolve);
  ~peer_refresh();  ///< stops the thread (a lookup going on is waited for)
  peer_refresh(const peer_refresh&) = delete;
  peer_refresh& operator=(const peer_refresh&) = delete;

private:
  void run();

  terminator& via_;
  std::vector<peer> peers_;
  uint32_t places_;
  std::chrono::milliseconds period_;
  resolver resolve_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace fusee::tls
