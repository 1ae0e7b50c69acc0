#include "tls/peer_refresh.hpp"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

namespace fusee::tls {

struct peer_refresh::state {
  std::mutex mu;
  std::condition_variable cv;
  terminator* via = nullptr;  ///< null once stopped (guarded by mu)
  std::vector<peer> peers;    ///< the thread's alone
  /// Each peer's places in the terminator (by the index of `peers`); none until it resolves.
  std::vector<std::optional<uint32_t>> places_of;
  uint32_t places = 0;
  std::chrono::milliseconds period{0};
  resolver resolve;
};

namespace {

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool is_v6(const std::string& ip) {
  return ip.find(':') != std::string::npos;
}

/// One round, after every host was looked up (`found`, by the index of st.peers). A lookup that
/// found nothing keeps what that peer had, and one whose other family failed keeps that family's.
/// Addresses no host resolves to any more are forgotten first, so that one a host left and
/// another got (a recycled address) moves to the other.
void apply_round(peer_refresh::state& st, std::vector<host_lookup> found) {
  std::vector<std::vector<std::string>> now;
  for (size_t i = 0; i < st.peers.size(); ++i) {
    auto& had = st.peers[i].had;
    auto& n = now.emplace_back(std::move(found[i].addresses));
    if (n.empty()) {
      n = had;
      continue;
    }
    for (auto& ip : n)
      ip = unmapped(ip);
    for (auto& ip : had)
      if ((is_v6(ip) ? found[i].v6_failed : found[i].v4_failed) && !has(n, ip)) n.push_back(ip);
  }
  auto resolved_by_any = [&](const std::string& ip) {
    return std::any_of(now.begin(), now.end(), [&](auto& n) { return has(n, ip); });
  };
  for (size_t i = 0; i < st.peers.size(); ++i) {
    auto& p = st.peers[i];
    std::vector<std::string> gone;  // (only its own: an address it had may be another's places)
    for (auto& ip : p.had)
      if (!resolved_by_any(ip) && !has(gone, ip) && st.via->peer_of(ip) == st.places_of[i])
        gone.push_back(ip);
    for (auto& ip : st.via->forget(gone))
      spdlog::info("cluster node {}: its host {} no longer resolves to {}: connections from "
                   "there are strangers' now",
                   p.name, p.host, ip);
  }
  for (size_t i = 0; i < st.peers.size(); ++i) {
    auto& p = st.peers[i];
    // An address that is another peer's moves here only if no host of that peer resolves to it
    // any more (nodes on one host share their places).
    std::vector<std::string> take;
    for (auto& ip : now[i]) {
      auto owner = st.via->peer_of(ip);
      if (owner && owner == st.places_of[i]) continue;
      bool kept = false;
      for (size_t j = 0; owner && j < st.peers.size() && !kept; ++j)
        kept = j != i && st.places_of[j] == owner && has(now[j], ip);
      if (!kept) take.push_back(ip);
    }
    for (auto& ip : st.via->assign(take, st.places_of[i], st.places))
      spdlog::info("cluster node {}: its host {} resolves to {} now: connections from there "
                   "count in its places",
                   p.name, p.host, ip);
  }
  for (size_t i = 0; i < st.peers.size(); ++i)  // (after: the loop above reads every node's)
    st.peers[i].had = std::move(now[i]);
}

void run(const std::shared_ptr<peer_refresh::state>& st) {
  std::unique_lock lk{st->mu};
  for (;;) {
    if (st->cv.wait_for(lk, st->period, [&] { return st->via == nullptr; })) return;
    std::vector<host_lookup> now;
    for (auto& p : st->peers) {
      lk.unlock();
      now.push_back(st->resolve(p.host));  // may block for the resolver's time-outs
      lk.lock();
      if (st->via == nullptr) return;  // stopped meanwhile: the terminator may be gone
    }
    apply_round(*st, std::move(now));
  }
}

}  // namespace

peer_refresh::peer_refresh(terminator& via, std::vector<peer> peers, uint32_t places,
                           std::chrono::milliseconds period, resolver resolve)
    : st_(std::make_shared<state>()) {
  st_->via = &via;
  st_->peers = std::move(peers);
  for (auto& p : st_->peers) {  // its places: those of its addresses at start, if any
    std::optional<uint32_t> at;
    for (auto& ip : p.had)
      if (!at) at = via.peer_of(ip);
    for (auto& ip : p.had)
      ip = unmapped(ip);
    st_->places_of.push_back(at);
  }
  st_->places = places;
  st_->period = period;
  st_->resolve = std::move(resolve);
  std::thread([st = st_] { run(st); }).detach();
}

peer_refresh::~peer_refresh() {
  {
    std::lock_guard lk{st_->mu};  // waits for a round being applied
    st_->via = nullptr;
  }
  st_->cv.notify_all();
}

}  // namespace fusee::tls
