// The out_lane on a real socket pair with tiny buffers, so every big frame is written in pieces:
// a "writer thread" sends small frames straight through the lane while an "owner" (the session
// broker's part) sends big frames and drains the lane through its own slow, chunked writes.
// First with one thread and a seeded schedule (deterministic interleavings), then with real
// threads (the lane's locking), then the limit and a broken connection.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/out_lane.hpp"
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

/// Plays the session broker: its own frames and the drained bytes leave through a buffer it
/// writes in small chunks (as CAF's multiplexer does), reporting each chunk with transferred().
struct owner {
  out_lane& lane;
  int fd;
  std::mutex mtx;
  std::condition_variable cv;
  std::deque<int> wakes;  ///< drain requests from the writer thread
  proto::bytes buffer;    ///< the "CAF buffer"

  void wake() {
    std::lock_guard<std::mutex> lk{mtx};
    wakes.push_back(1);
    cv.notify_one();
  }
  bool drain() {
    proto::bytes out;
    if (lane.drain(out) != out_lane::drained::ok) return false;
    buffer.insert(buffer.end(), out.begin(), out.end());
    return true;
  }
  void send(const proto::bytes& frame) {
    auto r = lane.send(frame);
    if (r == out_lane::outcome::queued || r == out_lane::outcome::wake_owner) drain();
  }
  /// Writes (part of) the buffer, as one turn of the multiplexer would.
  void write_some() {
    if (buffer.empty()) return;
    size_t n = std::min<size_t>(buffer.size(), 3000);
    ssize_t w = ::send(fd, buffer.data(), n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w <= 0) return;
    buffer.erase(buffer.begin(), buffer.begin() + w);
    lane.transferred(static_cast<uint64_t>(w));
  }
  void serve_wakes() {
    std::unique_lock<std::mutex> lk{mtx};
    bool any = !wakes.empty();
    wakes.clear();
    lk.unlock();
    if (any) drain();
  }
};

}  // namespace

TEST_CASE("under every interleaving a seeded schedule picks, the peer reads whole frames, each "
          "source in order") {
  // One thread plays everyone, so a seed fixes the interleaving: the writer thread sending small
  // frames, the broker sending big ones (and draining at once, as the session does), the broker
  // serving a wake-up from its mailbox, the multiplexer writing part of CAF's buffer, and the
  // peer reading a few bytes. 4 KiB socket buffers make the kernel take frames in pieces.
  for (uint64_t seed = 1; seed <= 25; ++seed) {
    CAPTURE(seed);
    socket_pair sp{4096};
    out_lane lane{sp.server, 1u << 30};
    std::mt19937_64 rng{seed};
    constexpr uint64_t smalls = 300, bigs = 20;
    uint64_t small_sent = 0, big_sent = 0, small_got = 0, big_got = 0;
    bool wake_in_mailbox = false;
    proto::bytes caf_buffer;  // what the broker handed to CAF, not yet written
    proto::frame_decoder dec;
    auto drain = [&] {
      proto::bytes out;
      REQUIRE(lane.drain(out) == out_lane::drained::ok);
      caf_buffer.insert(caf_buffer.end(), out.begin(), out.end());
    };
    for (int step = 0; small_got < smalls || big_got < bigs; ++step) {
      REQUIRE(step < 2000000);
      switch (rng() % 5) {
      case 0:  // the writer thread
        if (small_sent < smalls &&
            lane.send(small_frame(++small_sent)) == out_lane::outcome::wake_owner)
          wake_in_mailbox = true;
        break;
      case 1:  // the broker's own frame
        if (big_sent < bigs) {
          ++big_sent;
          auto r = lane.send(big_frame(big_sent, 1000 + rng() % 30000));
          if (r == out_lane::outcome::queued || r == out_lane::outcome::wake_owner) drain();
        }
        break;
      case 2:  // the broker takes the wake-up from its mailbox
        if (wake_in_mailbox) {
          wake_in_mailbox = false;
          drain();
        }
        break;
      case 3:  // the multiplexer writes part of CAF's buffer
        if (!caf_buffer.empty()) {
          size_t n = std::min<size_t>(caf_buffer.size(), 1 + rng() % 5000);
          ssize_t w = ::send(sp.server, caf_buffer.data(), n, MSG_DONTWAIT | MSG_NOSIGNAL);
          if (w > 0) {
            caf_buffer.erase(caf_buffer.begin(), caf_buffer.begin() + w);
            lane.transferred(static_cast<uint64_t>(w));
          }
        }
        break;
      default: {  // the peer reads a little
        uint8_t buf[3000];
        ssize_t n = ::recv(sp.peer, buf, 1 + rng() % sizeof(buf), MSG_DONTWAIT);
        if (n <= 0) break;
        dec.feed(buf, static_cast<size_t>(n));
        for (;;) {
          auto f = dec.next();
          REQUIRE_MESSAGE(f, f.err().to_string());
          if (!*f) break;
          auto m = proto::decode_response((*f)->kind, (*f)->body);
          REQUIRE(m);
          if (auto* d = std::get_if<proto::durable>(&*m)) {
            REQUIRE(d->positions.at(0).lsn.value() == ++small_got);
          } else {
            auto& c = std::get<proto::relayed_call>(*m);
            REQUIRE(c.relay == ++big_got);
            REQUIRE(proto::encode(c) == big_frame(big_got, c.args.size()));
          }
        }
      }
      }
    }
    CHECK(lane.waiting() == 0);
  }
}

TEST_CASE("the lane keeps frames whole and in send order when the socket takes them in pieces") {
  socket_pair sp{4096};
  out_lane lane{sp.server, 1u << 30};
  owner o{lane, sp.server, {}, {}, {}, {}};
  constexpr uint64_t smalls = 4000, bigs = 40;
  std::atomic<bool> writer_done{false};

  // The log's writer thread: small frames straight through the lane.
  std::thread writer([&] {
    for (uint64_t i = 1; i <= smalls; ++i)
      if (lane.send(small_frame(i)) == out_lane::outcome::wake_owner) o.wake();
    writer_done = true;
  });
  // The peer reads slowly and checks every frame: CRC (the decoder), and each source's order.
  uint64_t next_small = 1, next_big = 1;
  std::string problem;
  std::thread reader([&] {
    proto::frame_decoder dec;
    uint8_t buf[1500];
    while ((next_small <= smalls || next_big <= bigs) && problem.empty()) {
      pollfd p{sp.peer, POLLIN, 0};
      if (::poll(&p, 1, 10000) <= 0) {
        problem = "the peer waited 10 s for more bytes";
        return;
      }
      ssize_t n = ::recv(sp.peer, buf, sizeof(buf), 0);
      if (n <= 0) {
        problem = "connection closed";
        return;
      }
      dec.feed(buf, static_cast<size_t>(n));
      for (;;) {
        auto f = dec.next();
        if (!f) {
          problem = f.err().to_string();
          return;
        }
        if (!*f) break;
        auto m = proto::decode_response((*f)->kind, (*f)->body);
        if (!m) {
          problem = m.err().to_string();
          return;
        }
        if (auto* d = std::get_if<proto::durable>(&*m)) {
          if (d->positions.at(0).lsn.value() != next_small++) problem = "small frames out of order";
        } else if (auto* c = std::get_if<proto::relayed_call>(&*m)) {
          if (c->relay != next_big || proto::encode(*c) != big_frame(next_big, c->args.size()))
            problem = "big frame " + std::to_string(c->relay) + " out of order or damaged";
          ++next_big;
        }
      }
    }
  });
  // The owner: a big frame now and then, drains when asked, writes its buffer in chunks.
  for (uint64_t b = 1; !writer_done || !o.buffer.empty() || lane.waiting() > 0 || b <= bigs;) {
    if (b <= bigs) {
      o.send(big_frame(b, 20000 + 997 * b));
      ++b;
    }
    o.serve_wakes();
    o.write_some();
    pollfd p{sp.server, POLLOUT, 0};
    ::poll(&p, 1, 5);
    if (!problem.empty()) break;
  }
  writer.join();
  reader.join();
  CHECK_MESSAGE(problem.empty(), problem);
  CHECK(next_small == smalls + 1);
  CHECK(next_big == bigs + 1);
}

TEST_CASE("a peer that stops reading makes the lane refuse once more than its limit waits "
          "behind the frame being written") {
  socket_pair sp{4096};
  constexpr uint64_t limit = 256 * 1024;
  out_lane lane{sp.server, limit};
  auto frame = big_frame(1, 64 * 1024);
  int wakes = 0;
  uint64_t most = 0;
  for (int i = 0; i < 100; ++i) {
    auto r = lane.send(frame);
    REQUIRE(r != out_lane::outcome::closed);
    wakes += r == out_lane::outcome::wake_owner;
    most = std::max(most, lane.waiting());
  }
  CHECK(wakes == 1);  // the owner is asked once; it finds the refusal when it drains
  CHECK(most > limit);
  CHECK(most <= limit + 2 * frame.size());  // the head frame, the limit, one frame more
  proto::bytes out;
  CHECK(lane.drain(out) == out_lane::drained::over_limit);
  CHECK(out.empty());
}

TEST_CASE("a frame larger than the limit goes through, and so do the frames behind it while the "
          "peer reads") {
  socket_pair sp{4096};
  out_lane lane{sp.server, 16 * 1024};
  auto big = big_frame(1, 1 << 20);  // 64 times the limit
  REQUIRE(lane.send(big) == out_lane::outcome::wake_owner);
  for (uint64_t i = 1; i <= 100; ++i)  // 100 small frames: well under the limit behind it
    lane.send(small_frame(i));
  CHECK(lane.waiting_behind_head() < 16 * 1024);
  proto::bytes out;
  REQUIRE(lane.drain(out) == out_lane::drained::ok);
  // The owner writes what it took; the peer reads everything, whole and in order.
  size_t written = 0;
  proto::frame_decoder dec;
  uint64_t next_small = 1;
  bool big_seen = false;
  uint8_t buf[8192];
  for (int turns = 0; next_small <= 100; ++turns) {
    REQUIRE(turns < 100000);
    if (written < out.size()) {
      ssize_t w = ::send(sp.server, out.data() + written, out.size() - written, MSG_DONTWAIT);
      if (w > 0) {
        written += static_cast<size_t>(w);
        lane.transferred(static_cast<uint64_t>(w));
      }
    }
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
  ::shutdown(sp.peer, SHUT_RD);  // the peer reads no more, but keeps its end open
  auto r = lane.send(small_frame(1));
  CHECK(r == out_lane::outcome::closed);  // EPIPE
  CHECK(lane.send(small_frame(2)) == out_lane::outcome::closed);
  char c;
  // Our side was shut down by the lane: the session's reads see the end at once (the peer's
  // writing side is still open, so without the shutdown this would be EAGAIN).
  CHECK(::recv(sp.server, &c, 1, MSG_DONTWAIT) == 0);
}
