#include "tls/peer_refresh.hpp"

#include <utility>

#include <spdlog/spdlog.h>

namespace fusee::tls {

peer_refresh::peer_refresh(terminator& via, std::vector<peer> peers, uint32_t places,
                           std::chrono::milliseconds period, resolver resolve)
    : via_(via), peers_(std::move(peers)), places_(places), period_(period),
      resolve_(std::move(resolve)), thread_([this] { run(); }) {}

peer_refresh::~peer_refresh() {
  {
    std::lock_guard lk{mu_};
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void peer_refresh::run() {
  std::unique_lock lk{mu_};
  while (!cv_.wait_for(lk, period_, [this] { return stop_; })) {
    lk.unlock();
    for (auto& p : peers_) {
      auto now = resolve_(p.host);
      auto learned = via_.learn(p.had, now, places_);
      for (auto& ip : learned) {
        spdlog::info("cluster node {}: its host {} resolves to {} now: connections from there "
                     "count in its places",
                     p.name, p.host, ip);
        p.had.push_back(ip);
      }
    }
    lk.lock();
  }
}

}  // namespace fusee::tls
