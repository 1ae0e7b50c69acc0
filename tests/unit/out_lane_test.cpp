// The out_lane on a real socket pair with tiny buffers, so every big frame is written in pieces:
// a "writer thread" sends small frames straight through the lane while an "owner" (the session
// broker's part) sends big frames and drains the lane through its own slow, chunked writes.
#include <doctest/doctest.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
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

TEST_CASE("a peer that stops reading makes the lane refuse past its limit, holding at most one "
          "frame more") {
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
  CHECK(most <= limit + frame.size());
  proto::bytes out;
  CHECK(lane.drain(out) == out_lane::drained::over_limit);
  CHECK(out.empty());
  CHECK(lane.waiting() == 0);  // what waited is dropped: the connection ends
}
