#include "actors/net/io_loop.hpp"

#include <cerrno>
#include <cstring>
#include <ctime>

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/net/connection.hpp"
#include "logging/logging.hpp"

namespace fusee::server {

namespace {

constexpr int max_events = 64;
/// Turns without waiting after a full one (up to 64 × this many ready sockets are all read).
constexpr int drain_turns = 16;
constexpr size_t read_size = 64 * 1024;

}  // namespace

proto::result<std::unique_ptr<io_loop>> io_loop::start(options o) {
  std::unique_ptr<io_loop> l{new io_loop(std::move(o))};
  l->ep_ = ::epoll_create1(EPOLL_CLOEXEC);
  l->wake_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (l->ep_ < 0 || l->wake_ < 0)
    return proto::error{proto::err_code::io,
                        std::string{"cannot create the I/O threads' epoll set: "} +
                            std::strerror(errno)};
  epoll_event ev{};
  ev.events = EPOLLIN;  // level-triggered: once stop() writes it, every thread sees it
  ev.data.fd = l->wake_;
  ::epoll_ctl(l->ep_, EPOLL_CTL_ADD, l->wake_, &ev);
  l->seen_through_ = std::make_shared<std::atomic<int64_t>>(connection::now_ns());
  l->next_sweep_ns_ =
      connection::now_ns() +
      std::chrono::duration_cast<std::chrono::nanoseconds>(l->opts_.sweep_every).count();
  unsigned threads = std::max(1u, l->opts_.threads);
  l->turns_ = std::make_shared<turn_clocks>(threads);
  for (unsigned i = 0; i < threads; ++i)
    l->threads_.emplace_back([raw = l.get(), i] { raw->run(i); });
  return l;
}

io_loop::~io_loop() {
  stop();
  if (ep_ >= 0) ::close(ep_);
  if (wake_ >= 0) ::close(wake_);
}

void io_loop::stop() {
  if (stopping_.exchange(true)) return;
  uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof(one));
  for (auto& t : threads_)
    t.join();
  std::lock_guard<std::mutex> lk{mtx_};
  conns_.clear();
}

size_t io_loop::size() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return conns_.size();
}

bool io_loop::add(std::shared_ptr<connection> c) {
  int fd = c->fd_;
  c->seen_through_ = seen_through_;
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) return false;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    conns_[fd] = c;
  }
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  if (::epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    std::lock_guard<std::mutex> lk{mtx_};
    conns_.erase(fd);
    return false;
  }
  return true;
}

std::shared_ptr<connection> io_loop::find(int fd) const {
  std::lock_guard<std::mutex> lk{mtx_};
  auto i = conns_.find(fd);
  return i == conns_.end() ? nullptr : i->second;
}

void io_loop::remove(connection& c) {
  ::epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd_, nullptr);
  {
    std::lock_guard<std::mutex> lk{mtx_};
    auto i = conns_.find(c.fd_);
    if (i != conns_.end() && i->second.get() == &c) conns_.erase(i);
  }
  c.removed_ = true;
  ::close(c.fd_);  // the lane's duplicate keeps the socket until the session lets it go
}

bool io_loop::read(connection& c, bool& more, bool hung_up) {
  thread_local std::vector<uint8_t> buf(read_size);
  bool eof = false, got = false;
  int read_error = 0;
  more = false;
  int reads = 0;
  for (;;) {
    ssize_t n = ::recv(c.fd_, buf.data(), buf.size(), 0);
    if (n > 0) {
      got = true;
      c.bytes_in.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      if (!c.failed_) c.decoder_.feed(buf.data(), static_cast<size_t>(n));
      // A short read took everything there was: new bytes bring a new edge. Not so the end of
      // the stream, if it came with this event: it is only seen by reading on.
      if (static_cast<size_t>(n) < buf.size() && !hung_up) break;
      if (++reads == opts_.reads_per_turn) {
        more = true;  // served again after the others (rearm)
        break;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    eof = true;  // closed by the peer, or failed
    if (n < 0) read_error = errno;
    break;
  }
  if (got) {
    auto now = connection::now_ns();
    c.last_rx_ns.store(now, std::memory_order_relaxed);
    if (!c.failed_) {
      std::vector<proto::frame> frames;
      std::optional<proto::error> bad;
      c.decoder_.set_max_body(c.frame_limit.load(std::memory_order_relaxed));
      for (;;) {
        auto f = c.decoder_.next();
        if (!f) {
          bad = f.err();
          break;
        }
        if (!*f) break;
        frames.push_back(std::move(**f));
      }
      if (!frames.empty()) {
        c.frames_in.fetch_add(frames.size(), std::memory_order_relaxed);
        c.on_frames(frames);
      }
      if (bad) {
        c.failed_ = true;
        c.partial_since_ns.store(0, std::memory_order_relaxed);
        c.on_bad_stream(std::move(*bad));
      } else if (c.decoder_.buffered() == 0) {
        c.partial_since_ns.store(0, std::memory_order_relaxed);
      } else if (!frames.empty() || c.partial_since_ns.load(std::memory_order_relaxed) == 0) {
        c.partial_since_ns.store(now, std::memory_order_relaxed);  // a frame began in this read
      }
    }
  }
  if (eof) {
    c.on_closed(read_error);
    remove(c);
    return false;
  }
  return true;
}

void io_loop::rearm(connection& c) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.fd = c.fd_;
  ::epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd_, &ev);  // readable still: a new event for the set
}

void io_loop::serve(const std::shared_ptr<connection>& c) {
  for (;;) {
    uint32_t ev = c->events_.exchange(0);
    if (!c->removed_) {
      bool more = false;
      bool alive = true;
      if (ev & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
        alive = read(*c, more, (ev & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0);
      if (alive && (ev & EPOLLOUT)) c->lane_->flush();
      if (more) rearm(*c);
    }
    c->owned_.store(false);
    // Events that came in while this thread served it: serve them too, unless another thread
    // has taken them meanwhile.
    if (c->events_.load() == 0 || c->owned_.exchange(true)) return;
  }
}

void io_loop::sweep() {
  std::vector<std::shared_ptr<connection>> all;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    all.reserve(conns_.size());
    for (auto& [fd, c] : conns_)
      all.push_back(c);
  }
  // Deadlines count up to what was read, as liveness does: a HELLO waiting unread behind a long
  // commit is not late.
  std::chrono::steady_clock::time_point seen{
      std::chrono::nanoseconds(seen_through_->load(std::memory_order_acquire))};
  for (auto& c : all)
    c->on_sweep(seen);
}

void io_loop::take(const epoll_event* evs, int n) {
  for (int i = 0; i < n; ++i) {
    if (evs[i].data.fd == wake_) continue;  // stop()
    auto c = find(evs[i].data.fd);
    if (!c) continue;
    c->events_.fetch_or(evs[i].events);
    if (!c->owned_.exchange(true)) serve(c);
  }
}

void io_loop::seen_through(int64_t t) {
  auto cur = seen_through_->load(std::memory_order_relaxed);
  while (cur < t && !seen_through_->compare_exchange_weak(cur, t, std::memory_order_release,
                                                          std::memory_order_relaxed)) {
  }
}

void io_loop::turn_clocks::began(unsigned thread, int64_t now) {
  since_[thread].store(now, std::memory_order_relaxed);
}

void io_loop::turn_clocks::ended(unsigned thread, int64_t now) {
  auto since = since_[thread].exchange(0, std::memory_order_relaxed);
  if (since == 0) return;
  auto took = now - since;
  auto cur = longest_.load(std::memory_order_relaxed);
  while (cur < took && !longest_.compare_exchange_weak(cur, took, std::memory_order_relaxed)) {
  }
}

int64_t io_loop::turn_clocks::take_longest_ns(int64_t now) {
  auto longest = longest_.exchange(0, std::memory_order_relaxed);
  for (auto& s : since_)
    if (auto t = s.load(std::memory_order_relaxed); t != 0) longest = std::max(longest, now - t);
  return std::max<int64_t>(0, longest);
}

int io_loop::wait(epoll_event* evs, int64_t ns) {
  if (!no_pwait2_.load(std::memory_order_relaxed)) {
    timespec ts{ns / 1'000'000'000, static_cast<long>(ns % 1'000'000'000)};
    int n = ::epoll_pwait2(ep_, evs, max_events, &ts, nullptr);
    if (n >= 0 || (errno != ENOSYS && errno != EPERM)) return n;
    int err = errno;
    if (!no_pwait2_.exchange(true))
      spdlog::warn("epoll_pwait2 is not available ({}; Linux 5.11 or later, and a seccomp profile "
                   "that allows it): the I/O threads wait in whole milliseconds, so a commit held "
                   "for the sessions just told DURABLE may wait up to 1 ms longer",
                   std::strerror(err));
  }
  return ::epoll_wait(ep_, evs, max_events, static_cast<int>((ns + 999'999) / 1'000'000));
}

void io_loop::run(unsigned thread) {
  // A held commit's end is a deadline of µs: this thread's timers get 1 µs of slack, not 50.
  ::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  epoll_event evs[max_events];
  auto sweep_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(opts_.sweep_every).count();
  int64_t hold_until = 0;  // the commit is held: after_turn is asked again by then (0: not held)
  while (!stopping_.load(std::memory_order_relaxed)) {
    auto asked = connection::now_ns();
    turns_->ended(thread, asked);
    int64_t wait_ns = std::clamp<int64_t>(next_sweep_ns_.load() - asked, 0, 1'000'000'000);
    if (hold_until != 0) wait_ns = std::clamp<int64_t>(hold_until - asked, 0, wait_ns);
    int n = wait(evs, wait_ns);
    turns_->began(thread, connection::now_ns());
    if (n < 0) {
      if (errno == EINTR) continue;
      spdlog::error("the I/O threads' wait for their sockets failed: {}", std::strerror(errno));
      return;
    }
    // What had come when it asked is in `evs` (or still in the kernel if they are full); with
    // nothing at all, the whole wait was quiet.
    auto looked = n == 0 ? connection::now_ns() : asked;
    take(evs, n);
    // A full turn may have left ready sockets in the kernel: take those too, a few more turns
    // without waiting, so that what is published covers only what was read; a turn that never
    // got below full publishes nothing. Before the commit: it may take long, and (with one
    // thread) nothing is read meanwhile.
    bool whole = n < max_events;
    for (int more = 0; !whole && more < drain_turns; ++more) {
      auto at = connection::now_ns();
      int m = ::epoll_wait(ep_, evs, max_events, 0);
      if (m < 0) break;
      take(evs, m);
      if (m < max_events) whole = true, looked = at;
    }
    if (whole) seen_through(looked);
    if ((n > 0 || hold_until != 0) && opts_.after_turn) {
      auto hold = opts_.after_turn();
      hold_until = hold.count() > 0 ? connection::now_ns() + hold.count() : 0;
    }
    auto now = connection::now_ns();
    auto due = next_sweep_ns_.load();
    if (now >= due && next_sweep_ns_.compare_exchange_strong(due, now + sweep_ns)) sweep();
  }
  turns_->ended(thread, connection::now_ns());
}

}  // namespace fusee::server
