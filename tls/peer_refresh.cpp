#include "tls/peer_refresh.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

namespace fusee::tls {

struct peer_refresh::state {
  std::mutex mu;
  std::condition_variable cv;
  terminator* via = nullptr;  ///< null once stopped (guarded by mu)
  std::vector<peer> peers;    ///< the thread's alone
  uint32_t places = 0;
  std::chrono::milliseconds period{0};
  resolver resolve;
};

namespace {

void run(const std::shared_ptr<peer_refresh::state>& st) {
  std::unique_lock lk{st->mu};
  for (;;) {
    if (st->cv.wait_for(lk, st->period, [&] { return st->via == nullptr; })) return;
    for (auto& p : st->peers) {
      lk.unlock();
      auto now = st->resolve(p.host);  // may block for the resolver's time-outs
      lk.lock();
      if (st->via == nullptr) return;  // stopped meanwhile: the terminator may be gone
      if (now.empty()) continue;       // a failed lookup says nothing about the addresses
      for (auto& ip : st->via->learn(p.had, now, st->places)) {
        spdlog::info("cluster node {}: its host {} resolves to {} now: connections from there "
                     "count in its places",
                     p.name, p.host, ip);
        p.had.push_back(ip);
      }
      // Addresses the host left: another machine may get them (a recycled container address),
      // so they stop counting in the node's places, unless another node's host still has them.
      std::vector<std::string> gone;
      for (auto& ip : p.had)
        if (std::find(now.begin(), now.end(), ip) == now.end() &&
            std::none_of(st->peers.begin(), st->peers.end(), [&](const peer_refresh::peer& other) {
              return &other != &p &&
                     std::find(other.had.begin(), other.had.end(), ip) != other.had.end();
            }))
          gone.push_back(ip);
      for (auto& ip : st->via->forget(gone))
        spdlog::info("cluster node {}: its host {} no longer resolves to {}: connections from "
                     "there are strangers' now",
                     p.name, p.host, ip);
      p.had.erase(std::remove_if(p.had.begin(), p.had.end(),
                                 [&](const std::string& ip) {
                                   return std::find(now.begin(), now.end(), ip) == now.end();
                                 }),
                  p.had.end());
    }
  }
}

}  // namespace

peer_refresh::peer_refresh(terminator& via, std::vector<peer> peers, uint32_t places,
                           std::chrono::milliseconds period, resolver resolve)
    : st_(std::make_shared<state>()) {
  st_->via = &via;
  st_->peers = std::move(peers);
  st_->places = places;
  st_->period = period;
  st_->resolve = std::move(resolve);
  std::thread([st = st_] { run(st); }).detach();
}

peer_refresh::~peer_refresh() {
  {
    std::lock_guard lk{st_->mu};  // waits for a learn() going on
    st_->via = nullptr;
  }
  st_->cv.notify_all();
}

}  // namespace fusee::tls
