#include "worker/fleet.hpp"

#include <algorithm>
#include <limits>

#include <sys/epoll.h>
#include <unistd.h>

#include "protocol/unix_time.hpp"
#include "worker/session.hpp"

namespace fusee::worker {

namespace {
using namespace std::chrono_literals;
using clock = std::chrono::steady_clock;
constexpr uint64_t never = std::numeric_limits<uint64_t>::max();
}  // namespace

struct fleet::slot {
  worker_options options;
  std::unique_ptr<session> s;
  clock::time_point retry_at{};  ///< when a worker that is down connects again
  reconnect_backoff backoff;
  clock::time_point connected_at{};
  uint64_t wake = never;    ///< unix ms of its next timer, read after each of its turns
  bool connecting = false;  ///< HELLO sent, the LEASE not read yet
  clock::time_point hello_deadline{};
  bool served = false;  ///< turned already in this round of the loop
};

fleet::fleet(const registry& types, std::vector<worker_options> workers) : types_(types) {
  for (auto& o : workers) {
    auto w = std::make_unique<slot>();
    w->options = std::move(o);
    slots_.push_back(std::move(w));
  }
  count_ = slots_.size();
}

fleet::~fleet() {
  if (epoll_ >= 0) ::close(epoll_);
}

void fleet::connect(slot& w) {
  // Connects and sends HELLO; the LEASE is read by the loop when it comes (never waited for
  // here, so a slow server does not stall the connected workers).
  w.s = std::make_unique<session>(types_, w.options, false);
  auto ok = w.s->begin_connect(proto::offer_serve_calls, proto::invocation_id{});
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = &w;
  if (!ok || ::epoll_ctl(epoll_, EPOLL_CTL_ADD, w.s->fd(), &ev) != 0) {
    if (!ok && w.options.log)  // (the session says the rest: a refused HELLO, a lost lease)
      w.options.log(w.options.name + ": " + ok.err().message);
    failed(w);
    return;
  }
  w.connecting = true;
  w.hello_deadline = clock::now() + std::chrono::milliseconds(w.options.hello_timeout_ms);
  w.wake = never;
}

void fleet::failed(slot& w) {
  if (w.s->fd() >= 0) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, w.s->fd(), nullptr);
  w.s->close();
  w.s.reset();
  w.connecting = false;
  failed_connects_++;
  // Refusals of the HELLO itself (version, offers) do not change by retrying, but a fleet
  // keeps its size: it retries slowly and the counter tells.
  w.retry_at = clock::now() + w.backoff.after_failed_connect();
}

void fleet::leased(slot& w) {
  w.connecting = false;
  w.connected_at = clock::now();
  w.wake = 0;  // a first turn at once: recovery requests went out with the grants
  connected_++;
}

void fleet::down(slot& w, std::chrono::milliseconds for_at_least) {
  if (w.connecting) {
    failed(w);
    w.retry_at = std::max(w.retry_at, clock::now() + for_at_least);
    return;
  }
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, w.s->fd(), nullptr);
  w.s->close();
  w.s.reset();
  connected_--;
  w.retry_at = clock::now() +
               std::max(for_at_least, w.backoff.after_connection(clock::now() - w.connected_at));
}

void fleet::kill(size_t i, std::chrono::milliseconds down_for) {
  std::lock_guard lock(kill_mu_);
  kill_requests_.emplace_back(i, down_for);
}

void fleet::run() {
  if (epoll_ < 0) epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  std::vector<epoll_event> events(256);
  auto last_pings = clock::now();
  while (!stop_) {
    {
      std::vector<std::pair<size_t, std::chrono::milliseconds>> kills;
      {
        std::lock_guard lock(kill_mu_);
        kills.swap(kill_requests_);
      }
      for (auto [i, down_for] : kills)
        if (i < slots_.size() && slots_[i]->s && !slots_[i]->connecting) {
          down(*slots_[i], 0ms);
          slots_[i]->retry_at = clock::now() + down_for;
          kills_++;
        }
    }
    // Connects what is due; finds the soonest timer and the soonest reconnect.
    auto now = clock::now();
    auto next = now + 50ms;  // kill requests and stop() are looked at this often
    uint64_t soonest = never;
    for (auto& w : slots_) {
      // Connecting (TCP connect and HELLO; the LEASE is read when it comes) takes at most 20 ms
      // of each round, so the connected workers keep their turns while many (re)connect.
      if (!w->s && now >= w->retry_at && !stop_ && clock::now() - now < 20ms) connect(*w);
      if (w->s)
        soonest = std::min(soonest, w->wake);
      else
        next = std::min(next, w->retry_at);
    }
    auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - now);
    uint64_t ms = proto::unix_ms();
    if (soonest != never)
      wait = std::min(wait, std::chrono::milliseconds(soonest > ms ? soonest - ms : 0));
    int n = ::epoll_wait(epoll_, events.data(), static_cast<int>(events.size()),
                         static_cast<int>(std::max(0ms, wait).count()));
    if (n < 0 && errno != EINTR) break;
    // Readable workers first, then those whose timers are due (a turn runs both).
    auto serve = [&](slot& w) {
      if (w.connecting) {
        auto answer = w.s->lease_answer();
        if (!answer) return;  // not yet
        if (!*answer)
          failed(w);
        else
          leased(w);
        return;
      }
      if (!w.s->turn(0ms)) {
        losses_++;
        down(w, 0ms);
        return;
      }
      w.wake = w.s->more_received() ? 0 : w.s->next_wake();
    };
    for (int k = 0; k < n; ++k) {
      auto* w = static_cast<slot*>(events[k].data.ptr);
      if (w->s) {
        serve(*w);
        w->served = true;
      }
    }
    ms = proto::unix_ms();
    auto now2 = clock::now();
    for (auto& w : slots_) {
      if (w->s && w->connecting && now2 > w->hello_deadline)
        failed(*w);  // no LEASE in time
      else if (w->s && !w->served && w->wake <= ms)
        serve(*w);
      w->served = false;
    }
    if (clock::now() - last_pings >= 100ms) {
      for (auto& w : slots_)
        if (w->s && !w->connecting) w->s->ping_if_quiet();
      last_pings = clock::now();
    }
  }
  // Stopping: as runtime::run() does, each worker in turn (a fleet stops at the end of a run).
  for (auto& w : slots_) {
    if (!w->s) continue;
    if (w->connecting) {  // no lease yet: nothing to hand back
      ::epoll_ctl(epoll_, EPOLL_CTL_DEL, w->s->fd(), nullptr);
      w->s->close();
      w->s.reset();
      continue;
    }
    w->s->stop_serving(2s);
    down(*w, 0ms);
  }
}

}  // namespace fusee::worker
