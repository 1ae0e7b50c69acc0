// The I/O threads on real socket pairs: frames reach their connection whole, in order and from
// one thread at a time although several threads share the epoll set; the end of a stream (a
// peer's close, a bad frame) is said once; a lane's waiting bytes leave when the socket becomes
// writable, with nobody but the loop flushing; the turn hook and the sweep run.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include "actors/net/connection.hpp"
#include "actors/net/io_loop.hpp"
#include "actors/net/out_lane.hpp"
#include "protocol/messages.hpp"
#include "test_util.hpp"

using namespace fusee;
using namespace fusee::server;

namespace {

/// Records what the loop tells it; fails the test on overlapping calls or frames out of order.
struct recording_connection : connection {
  explicit recording_connection(int fd, uint64_t write_limit = 1 << 20)
      : connection(fd, write_limit, 1 << 20) {}
  std::mutex mtx;
  std::condition_variable cv;
  std::atomic<int> inside{0};
  bool overlapped = false;
  uint64_t next = 1;  ///< the PING id expected next
  bool out_of_order = false;
  int closed = 0, bad = 0, sweeps = 0;
  int read_error = -1;  ///< what on_closed was told
  std::string bad_why;

  void enter() {
    if (inside.fetch_add(1) != 0) overlapped = true;
  }
  void leave() { inside.fetch_sub(1); }

  void on_frames(std::vector<proto::frame>& frames) override {
    enter();
    {
      std::lock_guard<std::mutex> lk{mtx};
      for (auto& f : frames) {
        auto m = proto::decode_request(f.kind, f.body);
        if (!m || std::get<proto::ping>(*m).head.id != next) out_of_order = true;
        ++next;
      }
    }
    cv.notify_all();
    leave();
  }
  void on_bad_stream(proto::error e) override {
    enter();
    {
      std::lock_guard<std::mutex> lk{mtx};
      bad++;
      bad_why = e.message;
    }
    cv.notify_all();
    leave();
  }
  void on_closed(int error) override {
    enter();
    {
      std::lock_guard<std::mutex> lk{mtx};
      closed++;
      read_error = error;
    }
    cv.notify_all();
    leave();
  }
  void on_sweep(std::chrono::steady_clock::time_point) override {
    {
      std::lock_guard<std::mutex> lk{mtx};
      sweeps++;
    }
    cv.notify_all();
  }
  template <class Pred>
  bool await(Pred p) {
    std::unique_lock<std::mutex> lk{mtx};
    return cv.wait_for(lk, std::chrono::seconds(10), p);
  }
};

std::pair<int, int> socket_pair(int buffer = 0) {
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  if (buffer > 0) {
    ::setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
    ::setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  }
  return {fds[0], fds[1]};
}

/// `n` connections served by `loop`, and the peer end of each.
std::pair<std::vector<std::shared_ptr<recording_connection>>, std::vector<int>>
add_connections(io_loop& loop, int n) {
  std::vector<std::shared_ptr<recording_connection>> cs;
  std::vector<int> peers;
  for (int i = 0; i < n; ++i) {
    auto [ours, theirs] = socket_pair();
    cs.push_back(std::make_shared<recording_connection>(ours));
    peers.push_back(theirs);
    REQUIRE(loop.add(cs.back()));
  }
  return {std::move(cs), std::move(peers)};
}

/// Writes PING `id` to `fd` (a peer end) in one send.
void send_ping(int fd, uint64_t id) {
  auto f = proto::encode(proto::ping{proto::request_head{id}});
  REQUIRE(::send(fd, f.data(), f.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(f.size()));
}

std::unique_ptr<io_loop> start_loop(unsigned threads, std::function<void()> after = {},
                                    std::chrono::milliseconds sweep = std::chrono::seconds(1),
                                    int reads_per_turn = 16) {
  io_loop::options o;
  o.threads = threads;
  o.reads_per_turn = reads_per_turn;
  if (after)
    o.after_turn = [after = std::move(after)] {
      after();
      return std::chrono::nanoseconds{0};
    };
  o.sweep_every = sweep;
  auto l = io_loop::start(std::move(o));
  REQUIRE(l);
  return std::move(*l);
}

}  // namespace

TEST_CASE("each connection's frames reach it whole and in order, one thread at a time, although "
          "three threads share the loop") {
  std::atomic<int> turns{0};
  auto loop = start_loop(3, [&] { turns++; });
  constexpr int conns = 8;
  constexpr uint64_t frames = 2000;
  auto [cs, peers] = add_connections(*loop, conns);
  // Each peer writes its frames in random pieces, all peers at once.
  std::vector<std::thread> writers;
  for (int i = 0; i < conns; ++i)
    writers.emplace_back([fd = peers[i], seed = i] {
      std::mt19937 rng(seed);
      proto::bytes all;
      for (uint64_t id = 1; id <= frames; ++id) {
        auto f = proto::encode(proto::ping{proto::request_head{id}});
        all.insert(all.end(), f.begin(), f.end());
      }
      for (size_t at = 0; at < all.size();) {
        size_t n = std::min<size_t>(all.size() - at, 1 + rng() % 700);
        ssize_t w = ::send(fd, all.data() + at, n, MSG_NOSIGNAL);
        if (w <= 0) return;
        at += static_cast<size_t>(w);
      }
    });
  for (auto& w : writers)
    w.join();
  for (auto& c : cs) {
    REQUIRE(c->await([&] { return c->next == frames + 1; }));
    CHECK_FALSE(c->out_of_order);
    CHECK_FALSE(c->overlapped);
    CHECK(c->frames_in.load() == frames);
  }
  CHECK(turns.load() > 0);
  // A peer that closes is said once, and its connection leaves the loop.
  for (int p : peers)
    ::close(p);
  for (auto& c : cs)
    REQUIRE(c->await([&] { return c->closed == 1; }));
  for (int i = 0; i < 100 && loop->size() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // removal follows on_closed
  CHECK(loop->size() == 0);
  for (auto& c : cs) {
    CHECK(c->closed == 1);
    CHECK(c->read_error == 0);  // a clean end
  }
}

TEST_CASE("a connection reset by its peer is said with the failed read's errno") {
  auto loop = start_loop(1);
  auto [ours, theirs] = socket_pair();
  auto c = std::make_shared<recording_connection>(ours);
  REQUIRE(loop->add(c));
  // Bytes the peer never read are in its buffer when it closes: the kernel resets the connection.
  REQUIRE(c->lane()->send(proto::encode(proto::ping{proto::request_head{1}})) ==
          out_lane::outcome::written);
  ::close(theirs);
  REQUIRE(c->await([&] { return c->closed == 1; }));
  CHECK(c->read_error == ECONNRESET);
}

TEST_CASE("a connection with more than its share of a turn is read on by the other thread while "
          "the first one blocks after its turn (as when it commits the log)") {
  std::mutex m;
  std::condition_variable cv;
  bool release = false;
  std::atomic<bool> blocked{false};
  auto loop = start_loop(
      2,
      [&] {
        if (blocked.exchange(true)) return;  // the first turn's thread blocks, once
        std::unique_lock<std::mutex> lk{m};
        cv.wait(lk, [&] { return release; });
      },
      std::chrono::seconds(1), 1);  // one read of 64 KiB a turn
  auto [ours, theirs] = socket_pair();
  constexpr uint64_t frames = 6000;  // ~100 KiB: more than one read
  proto::bytes all;
  for (uint64_t id = 1; id <= frames; ++id) {
    auto f = proto::encode(proto::ping{proto::request_head{id}});
    all.insert(all.end(), f.begin(), f.end());
  }
  REQUIRE(all.size() > 64 * 1024);
  REQUIRE(::send(theirs, all.data(), all.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(all.size()));
  auto c = std::make_shared<recording_connection>(ours);
  REQUIRE(loop->add(c));
  // Everything arrives while the first thread still blocks: the rest was not kept for its next
  // turn.
  CHECK(c->await([&] { return c->next == frames + 1; }));
  CHECK(blocked.load());
  CHECK_FALSE(c->out_of_order);
  {
    std::lock_guard<std::mutex> lk{m};
    release = true;
  }
  cv.notify_all();
  ::close(theirs);
  REQUIRE(c->await([&] { return c->closed == 1; }));
}

TEST_CASE("a bad frame ends the stream: said once, and nothing after it is read") {
  auto loop = start_loop(2);
  auto [ours, theirs] = socket_pair();
  auto c = std::make_shared<recording_connection>(ours);
  REQUIRE(loop->add(c));
  auto good = proto::encode(proto::ping{proto::request_head{1}});
  auto after = proto::encode(proto::ping{proto::request_head{2}});
  proto::bytes all = good;
  all.insert(all.end(), {'N', 'O', 'P', 'E', 0, 0, 0, 0, 0, 0, 0, 0, 0});
  all.insert(all.end(), after.begin(), after.end());
  REQUIRE(::send(theirs, all.data(), all.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(all.size()));
  REQUIRE(c->await([&] { return c->bad == 1; }));
  CHECK(c->next == 2);  // the frame before it, not the one after
  CHECK(c->bad_why.find("magic") != std::string::npos);
  REQUIRE(::send(theirs, after.data(), after.size(), MSG_NOSIGNAL) > 0);  // dropped, not read
  ::close(theirs);
  REQUIRE(c->await([&] { return c->closed == 1; }));
  CHECK(c->bad == 1);
  CHECK(c->next == 2);
}

TEST_CASE("bytes waiting in a lane leave when the socket takes more, flushed by the loop alone") {
  auto loop = start_loop(2);
  auto [ours, theirs] = socket_pair(4096);
  auto c = std::make_shared<recording_connection>(ours, 64u << 20);
  REQUIRE(loop->add(c));
  proto::bytes args(1 << 20);
  for (size_t i = 0; i < args.size(); ++i)
    args[i] = static_cast<uint8_t>(i * 7);
  auto big = proto::encode(proto::relayed_call{0, 1, proto::shard_id{0}, "m", "", args});
  REQUIRE(c->lane()->send(big) == out_lane::outcome::queued);  // far more than the socket holds
  proto::bytes got;
  uint8_t buf[4096];
  while (got.size() < big.size()) {
    ssize_t n = ::recv(theirs, buf, sizeof(buf), 0);  // blocks: only the loop can send more
    REQUIRE(n > 0);
    got.insert(got.end(), buf, buf + n);
  }
  CHECK(got == big);
  CHECK(c->lane()->waiting() == 0);
  ::close(theirs);
}

TEST_CASE("every connection is swept about once per sweep_every") {
  auto loop = start_loop(2, {}, std::chrono::milliseconds(20));
  auto [ours, theirs] = socket_pair();
  auto c = std::make_shared<recording_connection>(ours);
  REQUIRE(loop->add(c));
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(c->await([&] { return c->sweeps >= 3; }));  // with nothing to read, the wait times out
  CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(40));
  ::close(theirs);
}

TEST_CASE("what the loop has seen through stands still while the one thread's turn hook blocks, "
          "and moves on only once every ready socket was read, past a full turn of 64") {
  // Once armed, the hook blocks each turn until the test lets it go: as the one I/O thread
  // committing the log.
  std::mutex mtx;
  std::condition_variable cv;
  bool armed = false;
  int entered = 0, permits = 0;
  auto loop = start_loop(1, [&] {
    std::unique_lock<std::mutex> lk{mtx};
    if (!armed) return;
    ++entered;
    cv.notify_all();
    cv.wait(lk, [&] { return permits > 0; });
    --permits;
  });
  auto hook_entered = [&](int n) {
    std::unique_lock<std::mutex> lk{mtx};
    return cv.wait_for(lk, std::chrono::seconds(10), [&] { return entered >= n; });
  };
  auto let_go = [&](int n) {
    std::lock_guard<std::mutex> lk{mtx};
    permits += n;
    cv.notify_all();
  };
  constexpr int conns = 100;  // more ready at once than one epoll_wait returns (64)
  auto [cs, peers] = add_connections(*loop, conns);
  std::vector<uint64_t> sent(conns, 0);
  auto ping = [&](int i) { send_ping(peers[i], ++sent[i]); };
  auto all_read = [&] {
    for (int i = 0; i < conns; ++i) {
      std::lock_guard<std::mutex> lk{cs[i]->mtx};
      if (cs[i]->next != sent[i] + 1) return false;
    }
    return true;
  };
  for (int i = 0; i < conns; ++i)  // every socket's first events taken: the loop is quiet
    ping(i);
  for (auto& c : cs)
    REQUIRE(c->await([&] { return c->next == 2; }));
  {
    std::lock_guard<std::mutex> lk{mtx};
    armed = true;
  }
  ping(0);
  REQUIRE(hook_entered(1));  // the turn that read it now "commits"
  auto before = cs[0]->seen_through_ns();
  for (int i = 0; i < conns; ++i)
    ping(i);
  auto written = connection::now_ns();
  std::this_thread::sleep_for(
      std::chrono::milliseconds(50));         // an interval, not a wait for an event
  CHECK(cs[0]->seen_through_ns() == before);  // nothing was read meanwhile
  let_go(1);
  REQUIRE(hook_entered(2));  // the next turn: 64 sockets, then the 36 left, then the hook
  CHECK(cs[0]->seen_through_ns() > written);
  CHECK(all_read());  // every socket it claims to have seen was read
  let_go(1 << 20);
  loop->stop();
  for (int p : peers)
    ::close(p);
}

TEST_CASE("a turn hook that holds its commit is asked again once the hold is up, with no event "
          "to read") {
  std::mutex mtx;
  std::condition_variable cv;
  // Once armed, the hook holds until `deadline` (it answers each call with the time left, as the
  // log does) and records the first call at or past it.
  bool armed = false;
  std::chrono::steady_clock::time_point deadline{}, asked_after{};
  io_loop::options o;
  o.threads = 1;
  o.sweep_every = std::chrono::seconds(10);  // a wake-up of its own would hide a lost hold
  o.after_turn = [&] {
    std::lock_guard<std::mutex> lk{mtx};
    auto now = std::chrono::steady_clock::now();
    if (!armed) return std::chrono::nanoseconds{0};
    if (deadline == std::chrono::steady_clock::time_point{})
      deadline = now + std::chrono::milliseconds(30);
    if (now < deadline) return std::chrono::nanoseconds(deadline - now);
    if (asked_after == std::chrono::steady_clock::time_point{}) asked_after = now;
    cv.notify_all();
    return std::chrono::nanoseconds{0};
  };
  auto l = io_loop::start(std::move(o));
  REQUIRE(l);
  auto loop = std::move(*l);
  auto [cs, peers] = add_connections(*loop, 1);
  auto ping = [fd = peers[0]](uint64_t id) { send_ping(fd, id); };
  ping(1);  // its turn (and the first EPOLLOUT's) before the hook is armed
  REQUIRE(cs[0]->await([&] { return cs[0]->next == 2; }));
  {
    std::lock_guard<std::mutex> lk{mtx};
    armed = true;
  }
  ping(2);  // the turn that reads it holds
  {
    std::unique_lock<std::mutex> lk{mtx};
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(10),
                        [&] { return asked_after != std::chrono::steady_clock::time_point{}; }));
    // Asked by the end of the hold's wait, not by the next sweep's (10 s after the start).
    CHECK(asked_after - deadline < std::chrono::seconds(5));
  }
  // Under tests/CMakeLists.txt's io_loop_without_epoll_pwait2 the kernel refuses epoll_pwait2:
  // the hold above was waited for in whole milliseconds. (Elsewhere either may have.)
  if (fusee::test::epoll_pwait2_denied()) CHECK(loop->waits_in_ms());
  loop->stop();
  ::close(peers[0]);
}

TEST_CASE("the turn clocks give the longest turn since they were last read, one going on "
          "included, and forget it once read") {
  std::mutex mtx;
  std::condition_variable cv;
  bool armed = false, inside = false, go = false;
  auto loop = start_loop(1, [&] {
    std::unique_lock<std::mutex> lk{mtx};
    if (!armed) return;
    armed = false;  // one long turn
    inside = true;
    cv.notify_all();
    cv.wait(lk, [&] { return go; });
  });
  auto turns = loop->turns();
  auto [cs, peers] = add_connections(*loop, 1);
  auto ping = [fd = peers[0]](uint64_t id) { send_ping(fd, id); };
  ping(1);
  REQUIRE(cs[0]->await([&] { return cs[0]->next == 2; }));
  {
    std::lock_guard<std::mutex> lk{mtx};
    armed = true;
  }
  ping(2);
  {
    std::unique_lock<std::mutex> lk{mtx};
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return inside; }));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the turn's length, not a sync
  auto t1 = connection::now_ns();
  auto going = turns->take_longest_ns(t1);
  CHECK(going >= 300'000'000);
  // Read again a second later (a clock value, not a wait): the turn going on still counts.
  CHECK(turns->take_longest_ns(t1 + 1'000'000'000) == going + 1'000'000'000);
  {
    std::lock_guard<std::mutex> lk{mtx};
    go = true;
    cv.notify_all();
  }
  ping(3);  // read in a turn after the long one: that one has ended
  REQUIRE(cs[0]->await([&] { return cs[0]->next == 4; }));
  CHECK(turns->take_longest_ns(connection::now_ns()) >= going);  // remembered once it ended
  CHECK(turns->take_longest_ns(connection::now_ns()) < going);   // and forgotten once read
  loop->stop();
  ::close(peers[0]);
}
