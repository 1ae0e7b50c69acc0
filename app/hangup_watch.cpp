#include "app/hangup_watch.hpp"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

namespace fusee::app {

struct hangup_watch::state {
  int epoll_fd = -1;
  int stop_fd = -1;  ///< an eventfd: written once to stop the thread (token 0)
  std::atomic<uint64_t> next_token{1};
  on_hangup f;
  std::thread thread;

  void run() {
    epoll_event events[64];
    for (;;) {
      int n = ::epoll_wait(epoll_fd, events, 64, -1);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return;
      for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == 0) return;
        f(events[i].data.u64);
      }
    }
  }
};

hangup_watch::hangup_watch(std::unique_ptr<state> s) : st_(std::move(s)) {}

std::unique_ptr<hangup_watch> hangup_watch::start(on_hangup f, std::string* err) {
  auto s = std::make_unique<state>();
  s->f = std::move(f);
  s->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  s->stop_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = 0;
  if (s->epoll_fd < 0 || s->stop_fd < 0 ||
      ::epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->stop_fd, &ev) != 0) {
    *err = std::string{"cannot watch HTTP connections for hang-ups: "} + std::strerror(errno);
    if (s->epoll_fd >= 0) ::close(s->epoll_fd);
    if (s->stop_fd >= 0) ::close(s->stop_fd);
    return nullptr;
  }
  auto* raw = s.get();
  s->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<hangup_watch>{new hangup_watch(std::move(s))};
}

void hangup_watch::stop() {
  if (!st_->thread.joinable()) return;
  uint64_t one = 1;
  (void)!::write(st_->stop_fd, &one, sizeof(one));
  st_->thread.join();
}

hangup_watch::~hangup_watch() {
  stop();
  ::close(st_->epoll_fd);
  ::close(st_->stop_fd);
}

uint64_t hangup_watch::next_token() {
  return st_->next_token.fetch_add(1, std::memory_order_relaxed);
}

bool hangup_watch::add(int fd, uint64_t token) {
  epoll_event ev{};
  ev.events = EPOLLRDHUP | EPOLLONESHOT;  // (EPOLLHUP and EPOLLERR come unasked)
  ev.data.u64 = token;
  return ::epoll_ctl(st_->epoll_fd, EPOLL_CTL_ADD, fd, &ev) == 0;
}

void hangup_watch::remove(int fd) {
  (void)::epoll_ctl(st_->epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
}

}  // namespace fusee::app
