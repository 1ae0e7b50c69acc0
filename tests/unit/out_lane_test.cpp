// The out_lane on a real socket pair with tiny buffers, so every big frame is written in pieces:
// the "committing thread" sends small frames (DURABLE) through the lane while the "session actor"
// sends big ones, and the "I/O thread" flushes what waits when the socket takes more. First with
// one thread and a seeded schedule (deterministic interleavings), then with real threads (the
// lane's locking), then the limit, a broken connection and a close.
#include <doctest/doctest.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/net/out_lane.hpp"
#include "protocol/messages.hpp"

using namespace fusee;
using namespace fusee::server;

namespace {

struct socket_pair {
  int server = -1, peer = -1;
  explicit socket_pair(int buffer) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds) == 0);
    server = fds[0];
    peer = fds[1];
    ::setsockopt(server, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer));
    ::setsockopt(peer, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer));
  }
  ~socket_pair() {
    ::close(server);
    ::close(peer);
  }
};

proto::bytes small_frame(uint64_t seq) {
  return proto::encode(proto::durable{
      0, {proto::position{proto::shard_id{1}, proto::epoch_t{1}, proto::lsn_t{seq}}}});
}

proto::bytes big_frame(uint64_t seq, size_t size) {
  proto::bytes args(size);
  for (size_t k = 0; k < size; ++k)
    args[k] = static_cast<uint8_t>((seq * 31 + k) & 0xFF);
  return proto::encode(proto::relayed_call{0, seq, proto::shard_id{0}, "m", "", std::move(args)});
}

}  // namespace

/// Reads what the peer has, checking every frame: whole (the decoder's CRC), each source in order.
struct checker {
  proto::frame_decoder dec;
  uint64_t small_got = 0, big_got = 0;
  std::string problem;
  void feed(const uint8_t* p, size_t n) {
    dec.feed(p, n);
    for (;;) {
      auto f = dec.next();
      if (!f) {
        problem = f.err().to_string();
        return;
      }
      if (!*f) return;
      auto m = proto::decode_response((*f)->kind, (*f)->body);
      if (!m) {
        problem = m.err().to_string();
        return;
      }
      if (auto* d = std::get_if<proto::durable>(&*m)) {
        if (d->positions.at(0).lsn.value() != ++small_got) problem = "small frames out of order";
      } else if (auto* c = std::get_if<proto::relayed_call>(&*m)) {
        ++big_got;
        if (c->relay != big_got || proto::encode(*c) != big_frame(big_got, c->args.size()))
          problem = "big frame " + std::to_string(c->relay) + " out of order or damaged";
      }
    }
  }
};

TEST_CASE("under every interleaving a seeded schedule picks, the peer reads whole frames, each "
          "source in order") {
  // One thread plays everyone, so a seed fixes the interleaving: the committing thread sending
  // small frames, the session actor sending big ones, the I/O thread flushing when the socket is
  // writable, and the peer reading a few bytes. 4 KiB socket buffers make the kernel take frames
  // in pieces.
  for (uint64_t seed = 1; seed <= 25; ++seed) {
    CAPTURE(seed);
    socket_pair sp{4096};
    out_lane lane{sp.server, 1u << 30};
    std::mt19937_64 rng{seed};
    constexpr uint64_t smalls = 300, bigs = 20;
    uint64_t small_sent = 0, big_sent = 0;
    checker peer;
    for (int step = 0; peer.small_got < smalls || peer.big_got < bigs; ++step) {
      REQUIRE(step < 2000000);
      switch (rng() % 4) {
      case 0:  // the committing thread
        if (small_sent < smalls)
          REQUIRE(lane.send(small_frame(++small_sent)) != out_lane::outcome::closed);
        break;
      case 1:  // the session actor
        if (big_sent < bigs) {
          ++big_sent;
          REQUIRE(lane.send(big_frame(big_sent, 1000 + rng() % 30000)) !=
                  out_lane::outcome::closed);
        }
        break;
      case 2:  // the I/O thread: the socket became writable
        lane.flush();
        break;
      default: {  // the peer reads a little
        uint8_t buf[3000];
        ssize_t n = ::recv(sp.peer, buf, 1 + rng() % sizeof(buf), MSG_DONTWAIT);
        if (n > 0) peer.feed(buf, static_cast<size_t>(n));
        REQUIRE_MESSAGE(peer.problem.empty(), peer.problem);
      }
      }
    }
    CHECK(lane.waiting() == 0);
  }
}

TEST_CASE("the lane keeps frames whole and in send order when the socket takes them in pieces") {
  socket_pair sp{4096};
  out_lane lane{sp.server, 1u << 30};
  constexpr uint64_t smalls = 4000, bigs = 40;
  std::atomic<bool> senders_done{false}, refused{false};
  // The committing thread: small frames.
  std::thread committer([&] {
    for (uint64_t i = 1; i <= smalls; ++i)
      if (auto r = lane.send(small_frame(i));
          r == out_lane::outcome::closed || r == out_lane::outcome::over_limit)
        refused = true;
  });
  // The I/O thread: flushes whenever the socket takes more.
  std::thread io([&] {
    while (!senders_done || lane.waiting() > 0) {
      pollfd p{sp.server, POLLOUT, 0};
      ::poll(&p, 1, 5);
      lane.flush();
    }
  });
  // The peer reads slowly and checks every frame.
  checker peer;
  std::thread reader([&] {
    uint8_t buf[1500];
    while ((peer.small_got < smalls || peer.big_got < bigs) && peer.problem.empty()) {
      pollfd p{sp.peer, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) {
        peer.problem = "the peer waited 10 s for more bytes";
        return;
      }
      ssize_t n = ::recv(sp.peer, buf, sizeof(buf), 0);
      if (n <= 0) {
        peer.problem = "connection closed";
        return;
      }
      peer.feed(buf, static_cast<size_t>(n));
    }
  });
  // The session actor: big frames.
  for (uint64_t b = 1; b <= bigs; ++b) {
    REQUIRE(lane.send(big_frame(b, 20000 + 997 * b)) != out_lane::outcome::closed);
    std::this_thread::yield();
  }
  committer.join();
  senders_done = true;
  io.join();
  reader.join();
  CHECK_MESSAGE(peer.problem.empty(), peer.problem);
  CHECK_FALSE(refused);
  CHECK(peer.small_got == smalls);
  CHECK(peer.big_got == bigs);
}

TEST_CASE("a peer that stops reading makes the lane refuse once more than its limit waits "
          "behind the frame being written") {
  socket_pair sp{4096};
  constexpr uint64_t limit = 256 * 1024;
  out_lane lane{sp.server, limit};
  auto frame = big_frame(1, 64 * 1024);
  int over = 0, closed = 0;
  uint64_t most = 0;
  for (int i = 0; i < 100; ++i) {
    auto r = lane.send(frame);
    over += r == out_lane::outcome::over_limit;
    closed += r == out_lane::outcome::closed;
    most = std::max(most, lane.waiting());
  }
  CHECK(over == 1);   // said once: its caller ends the connection
  CHECK(closed > 0);  // everything after it is dropped
  CHECK(most > limit);
  CHECK(most <= limit + 2 * frame.size());  // the head frame, the limit, one frame more
  CHECK_FALSE(lane.flush());
}

TEST_CASE("a frame larger than the limit goes through, and so do the frames behind it while the "
          "peer reads") {
  socket_pair sp{4096};
  out_lane lane{sp.server, 16 * 1024};
  auto big = big_frame(1, 1 << 20);  // 64 times the limit
  REQUIRE(lane.send(big) == out_lane::outcome::queued);
  for (uint64_t i = 1; i <= 100; ++i)  // 100 small frames: well under the limit behind it
    REQUIRE(lane.send(small_frame(i)) == out_lane::outcome::queued);
  CHECK(lane.waiting_behind_head() < 16 * 1024);
  // The I/O thread flushes as the peer reads; the peer reads everything, whole and in order.
  proto::frame_decoder dec;
  uint64_t next_small = 1;
  bool big_seen = false;
  uint8_t buf[8192];
  for (int turns = 0; next_small <= 100; ++turns) {
    REQUIRE(turns < 100000);
    lane.flush();
    ssize_t n = ::recv(sp.peer, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) dec.feed(buf, static_cast<size_t>(n));
    for (;;) {
      auto f = dec.next();
      REQUIRE(f);
      if (!*f) break;
      auto m = proto::decode_response((*f)->kind, (*f)->body);
      REQUIRE(m);
      if (std::holds_alternative<proto::relayed_call>(*m)) {
        CHECK(next_small == 1);
        big_seen = true;
      } else {
        CHECK(big_seen);
        CHECK(std::get<proto::durable>(*m).positions.at(0).lsn.value() == next_small++);
      }
    }
  }
  CHECK(lane.waiting() == 0);
  CHECK(lane.send(small_frame(101)) == out_lane::outcome::written);  // straight again
}

TEST_CASE("a broken connection closes the lane and shuts the socket down") {
  socket_pair sp{4096};
  out_lane lane{sp.server, 1 << 20};
  CHECK(lane.failure() == 0);
  ::shutdown(sp.peer, SHUT_RD);  // the peer reads no more, but keeps its end open
  auto r = lane.send(small_frame(1));
  CHECK(r == out_lane::outcome::closed);
  CHECK(lane.failure() == EPIPE);  // kept for the session's log line
  CHECK(lane.send(small_frame(2)) == out_lane::outcome::closed);
  char c;
  // Our side was shut down by the lane: the session's reads see the end at once (the peer's
  // writing side is still open, so without the shutdown this would be EAGAIN).
  CHECK(::recv(sp.server, &c, 1, MSG_DONTWAIT) == 0);
}

TEST_CASE("a closed lane delivers what the kernel holds, then the peer sees the end") {
  socket_pair sp{1 << 16};
  out_lane lane{sp.server, 1 << 20};
  REQUIRE(lane.send(small_frame(1)) == out_lane::outcome::written);
  lane.close();
  CHECK(lane.send(small_frame(2)) == out_lane::outcome::closed);
  checker peer;
  uint8_t buf[256];
  ssize_t n;
  while ((n = ::recv(sp.peer, buf, sizeof(buf), 0)) > 0)
    peer.feed(buf, static_cast<size_t>(n));
  CHECK(n == 0);  // the end, after the frame
  CHECK(peer.small_got == 1);
  CHECK(peer.problem.empty());
}
