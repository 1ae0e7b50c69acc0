#include "worker/fleet.hpp"

#include <algorithm>
#include <limits>

#include <poll.h>

#include "worker/session.hpp"

namespace fusee::worker {

namespace {
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
constexpr uint64_t never = std::numeric_limits<uint64_t>::max();

uint64_t unix_ms() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}
}  // namespace

struct fleet::slot {
  worker_options options;
  std::unique_ptr<session> s;
  clock::time_point retry_at{};  ///< when a worker that is down connects again
  std::chrono::milliseconds backoff{100};
  clock::time_point connected_at{};
  uint64_t wake = never;  ///< unix ms of its next timer, read after each of its turns
};

fleet::fleet(const registry& types, std::vector<worker_options> workers) : types_(types) {
  for (auto& o : workers) {
    auto w = std::make_unique<slot>();
    w->options = std::move(o);
    slots_.push_back(std::move(w));
  }
  count_ = slots_.size();
}

fleet::~fleet() = default;

void fleet::connect(slot& w) {
  w.s = std::make_unique<session>(types_, w.options, false);
  auto ok = w.s->connect(proto::offer_serve_calls, proto::invocation_id{});
  if (!ok) {
    w.s.reset();
    failed_connects_++;
    // Refusals of the HELLO itself (version, offers) do not change by retrying, but a fleet
    // keeps its size: it retries slowly and the counter tells.
    w.retry_at = clock::now() + w.backoff;
    w.backoff = std::min<std::chrono::milliseconds>(w.backoff * 2, 5s);
    return;
  }
  w.connected_at = clock::now();
  w.wake = 0;  // a first turn at once: recovery requests went out with the HELLO's grants
  connected_++;
}

void fleet::down(slot& w, std::chrono::milliseconds for_at_least) {
  w.s->close();
  w.s.reset();
  connected_--;
  // A connection the server keeps closing must not become a tight loop.
  if (clock::now() - w.connected_at < 1s)
    w.backoff = std::min<std::chrono::milliseconds>(w.backoff * 2, 5s);
  else
    w.backoff = 100ms;
  w.retry_at = clock::now() + std::max(for_at_least, w.backoff);
}

void fleet::kill(size_t i, std::chrono::milliseconds down_for) {
  std::lock_guard lock(kill_mu_);
  kill_requests_.emplace_back(i, down_for);
}

void fleet::run() {
  std::vector<pollfd> fds;
  std::vector<slot*> polled;
  auto last_pings = clock::now();
  while (!stop_) {
    {
      std::vector<std::pair<size_t, std::chrono::milliseconds>> kills;
      {
        std::lock_guard lock(kill_mu_);
        kills.swap(kill_requests_);
      }
      for (auto [i, down_for] : kills)
        if (i < slots_.size() && slots_[i]->s) {
          down(*slots_[i], 0ms);
          slots_[i]->retry_at = clock::now() + down_for;
          kills_++;
        }
    }
    auto now = clock::now();
    fds.clear();
    polled.clear();
    auto next = now + 50ms;  // kill requests and stop() are looked at this often
    uint64_t soonest = never;
    for (auto& w : slots_) {
      if (!w->s && now >= w->retry_at && !stop_) connect(*w);
      if (!w->s) {
        next = std::min(next, w->retry_at);
        continue;
      }
      fds.push_back(pollfd{w->s->fd(), POLLIN, 0});
      polled.push_back(w.get());
      soonest = std::min(soonest, w->wake);
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
    if (soonest != never) {
      uint64_t ms = unix_ms();
      wait = std::min(wait, std::chrono::milliseconds(soonest > ms ? soonest - ms : 0));
    }
    int rc = ::poll(fds.data(), fds.size(), static_cast<int>(std::max(0ms, wait).count()));
    if (rc < 0 && errno != EINTR) break;
    uint64_t ms = unix_ms();
    for (size_t k = 0; k < polled.size(); ++k) {
      auto& w = *polled[k];
      if (fds[k].revents == 0 && w.wake > ms) continue;
      if (!w.s->turn(0ms)) {
        losses_++;
        down(w, 0ms);
        continue;
      }
      w.wake = w.s->more_received() ? 0 : w.s->next_wake();
    }
    if (clock::now() - last_pings >= 100ms) {
      for (auto* w : polled)
        if (w->s) w->s->ping_if_quiet();
      last_pings = clock::now();
    }
  }
  // Stopping: as runtime::run() does, each worker in turn (a fleet stops at the end of a run).
  for (auto& w : slots_) {
    if (!w->s) continue;
    w->s->drain(2s);
    auto checkpoints = w->s->checkpoint_if(1, true);
    w->s->settle(2s);
    w->s->await_oks(checkpoints, 2s);
    w->s->close();
    w->s.reset();
    connected_--;
  }
}

}  // namespace fusee::worker
