// A worker session against a server the test plays frame by frame on a loopback socket: what it
// sends while its window of APPENDs is full, and what frees the window (a DURABLE, the answer to a
// RELEASE). Single-threaded: the test alternates the session's turns and the server's reads.
#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <vector>

#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "worker/session.hpp"

using namespace fusee;
using namespace fusee::worker;
using namespace std::chrono_literals;

namespace {

/// The server's side of one worker connection, played by the test.
class scripted_server {
public:
  scripted_server(const scripted_server&) = delete;
  scripted_server& operator=(const scripted_server&) = delete;
  scripted_server() {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_ >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(listen_, 1) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port_ = ntohs(a.sin_port);
  }
  ~scripted_server() {
    if (fd_ >= 0) ::close(fd_);
    ::close(listen_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  /// Takes the worker's connection (its connect completed in the backlog).
  void accept_worker() {
    fd_ = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
    REQUIRE(fd_ >= 0);
    int one = 1;  // each frame at once, as the server writes them (no wait for the last ACK)
    REQUIRE(::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) == 0);
  }

  /// The next request the worker sent within `wait`, PINGs skipped; nullopt if none came.
  std::optional<proto::any_message> next(std::chrono::milliseconds wait = 0ms) {
    for (;;) {
      auto f = decoder_.next();
      REQUIRE(f);
      if (*f) {
        auto m = proto::decode_request((*f)->kind, (*f)->body);
        REQUIRE(m);
        if (std::holds_alternative<proto::ping>(*m)) continue;
        return std::move(*m);
      }
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return std::nullopt;
      uint8_t buf[65536];
      auto n = ::read(fd_, buf, sizeof buf);
      REQUIRE(n > 0);
      decoder_.feed(buf, static_cast<size_t>(n));
    }
  }

  /// The next request, which must be a T and come within 2 s.
  template <class T>
  T expect() {
    auto m = next(2000ms);
    REQUIRE(m.has_value());
    auto* t = std::get_if<T>(&*m);
    REQUIRE_MESSAGE(t != nullptr,
                    "got " << proto::kind_name(static_cast<uint8_t>(proto::kind_of(*m))));
    return std::move(*t);
  }

  /// Every request already sent (nothing awaited), in order: for checks that nothing more came.
  std::vector<proto::any_message> drain() {
    std::vector<proto::any_message> out;
    while (auto m = next())
      out.push_back(std::move(*m));
    return out;
  }

  void send(const proto::any_message& m) {
    auto bytes = proto::encode(m);
    REQUIRE(::write(fd_, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  }

private:
  int listen_ = -1;
  int fd_ = -1;
  uint16_t port_ = 0;
  proto::frame_decoder decoder_;
};

/// "steps": `n` steps one after another, each a record of its own; "ticking": the same with a
/// 1 ms sleep before each step, so its records keep coming turn after turn.
registry stepping_types() {
  registry r;
  r.add("steps", [](context& ctx, json in) -> task<json> {
    int n = in.value("n", 0);
    for (int i = 0; i < n; ++i) {
      std::string name = "s" + std::to_string(i);
      co_await ctx.step(name, [i] { return i; });
    }
    co_return json(n);
  });
  r.add("ticking", [](context& ctx, json in) -> task<json> {
    int n = in.value("n", 0);
    for (int i = 0; i < n; ++i) {
      co_await ctx.sleep(std::chrono::milliseconds(1));
      std::string name = "s" + std::to_string(i);
      co_await ctx.step(name, [i] { return i; });
    }
    co_return json(n);
  });
  return r;
}

std::vector<proto::append> appends_in(const std::vector<proto::any_message>& ms) {
  std::vector<proto::append> out;
  for (auto& m : ms)
    if (auto* a = std::get_if<proto::append>(&m)) out.push_back(*a);
  return out;
}

/// A session with a window of `window` APPENDs holding shards 0 and 1 (epoch 1, nothing in their
/// logs), a run of `type` with `n` steps started on each. Without a type: "steps", 20 steps, a
/// window of 2, and the turns taken until both runs stepped through and the window is full.
struct window_rig {
  scripted_server server;
  registry types = stepping_types();
  worker_options options;
  std::vector<std::string> log;  ///< the session's lines for the operator
  std::unique_ptr<session> session_;
  session& s;
  std::vector<proto::append> out;  ///< the APPENDs the window holds

  window_rig() : window_rig(2, "steps", 20) {
    for (int i = 0; i < 200 && s.steps() < 40; ++i)
      REQUIRE(s.turn(5ms));
    REQUIRE(s.steps() == 40);
    out = await_appends(2);
    CHECK(appends_in(server.drain()).empty());  // a window of two
  }

  window_rig(uint32_t window, const std::string& type, int n)
      : options([&] {
          worker_options o;
          o.server = server.address();
          o.max_appends_in_flight = window;
          o.log = [this](const std::string& line) { log.push_back(line); };
          return o;
        }()),
        session_(std::make_unique<session>(types, options, false)), s(*session_) {
    REQUIRE(s.begin_connect(proto::offer_serve_calls, proto::invocation_id{}));
    server.accept_worker();
    auto h = server.expect<proto::hello>();
    proto::lease l;
    l.id = h.head.id;
    l.shard_count = 2;
    l.ping_interval_ms = 60000;
    l.timeout_ms = 180000;
    for (uint32_t sh : {0u, 1u})
      l.grants.push_back({proto::shard_id{sh}, proto::epoch_t{1}, proto::lsn_t{0}});
    server.send(l);
    std::optional<proto::result<void>> answer;
    for (int i = 0; i < 200 && !answer; ++i) {
      pollfd p{s.fd(), POLLIN, 0};
      ::poll(&p, 1, 10);
      answer = s.lease_answer();
    }
    REQUIRE(answer.has_value());
    REQUIRE(*answer);
    for (int i = 0; i < 2; ++i) {
      auto load = server.expect<proto::load_checkpoint>();
      server.send(proto::checkpoint_data{load.head.id, proto::lsn_t{0}, {}});
    }
    uint64_t relay = 1;
    for (auto [shard, id] : {std::pair{0u, "w0"}, std::pair{1u, "w1"}}) {
      json args{{"id", id}, {"type", type}, {"input", {{"n", n}}}};
      auto text = args.dump();
      server.send(proto::relayed_call{0, relay++, proto::shard_id{shard}, "start", type,
                                      proto::bytes(text.begin(), text.end())});
    }
  }

  /// The next `n` APPENDs, turning the session until they came (at most 2 s).
  std::vector<proto::append> await_appends(size_t n) {
    std::vector<proto::append> got;
    for (int i = 0; i < 400 && got.size() < n; ++i) {
      REQUIRE(s.turn(5ms));
      while (got.size() < n)
        if (auto m = server.next(); !m)
          break;
        else if (auto* a = std::get_if<proto::append>(&*m))
          got.push_back(*a);
    }
    REQUIRE(got.size() == n);
    return got;
  }

  /// An ERR for the first APPEND of `shard` the window holds (LSN_GAP, as the server refuses an
  /// APPEND at commit): the session gives the shard up with RELEASE; its id.
  uint64_t refuse_append_of(uint32_t shard) {
    for (auto& a : out)
      if (a.head.shard.value() == shard) {
        server.send(proto::make_err(a.head.id,
                                    proto::error{proto::err_code::lsn_gap, "refused by the test"}));
        REQUIRE(s.turn(100ms));
        auto r = server.expect<proto::release>();
        CHECK(r.head.shard.value() == shard);
        return r.head.id;
      }
    FAIL("no APPEND of shard " << shard << " is held");
    return 0;
  }

  /// The APPENDs the next few turns send: for checks that none went out (nothing is awaited).
  std::vector<proto::append> next_appends() {
    for (int i = 0; i < 3; ++i)
      REQUIRE(s.turn(5ms));
    return appends_in(server.drain());
  }
};

}  // namespace

TEST_CASE("a worker session with a full window of APPENDs sends none until a DURABLE frees a "
          "slot, and then one") {
  window_rig rig;
  CHECK(rig.next_appends().empty());
  auto& first = rig.out[0];
  uint64_t last = first.first_lsn.value() + first.records.size() - 1;
  rig.server.send(proto::durable{0, {{first.head.shard, first.head.epoch, proto::lsn_t{last}}}});
  rig.await_appends(1);
  CHECK(rig.next_appends().empty());  // the other slot is still held
}

TEST_CASE("a shard a worker session gives up keeps its APPENDs' slots until its RELEASE is "
          "answered with OK, then the other shard uses them") {
  window_rig rig;
  uint32_t shard = rig.out[0].head.shard.value();
  uint64_t release = rig.refuse_append_of(shard);
  CHECK(rig.next_appends().empty());  // the server's queue may still count them
  rig.server.send(proto::ok{release, {}});
  CHECK(rig.await_appends(1)[0].head.shard.value() == 1 - shard);
}

TEST_CASE("a shard a worker session gives up keeps its APPENDs' slots until its RELEASE is "
          "answered with ERR, then the other shard uses them") {
  window_rig rig;
  uint32_t shard = rig.out[0].head.shard.value();
  uint64_t release = rig.refuse_append_of(shard);
  CHECK(rig.next_appends().empty());
  rig.server.send(
      proto::make_err(release, proto::error{proto::err_code::not_holder, "not held any more"}));
  CHECK(rig.await_appends(1)[0].head.shard.value() == 1 - shard);
}

TEST_CASE("a worker session whose window frees one slot at a time gives the shards turns: one that "
          "keeps appending does not keep the slot from the other") {
  window_rig rig(1, "ticking", 1000);
  std::vector<uint32_t> order;  // the shard of each APPEND, in the order they came
  for (int i = 0; i < 12; ++i) {
    auto a = rig.await_appends(1)[0];
    uint32_t shard = a.head.shard.value();
    order.push_back(shard);
    // Before the slot comes free, the shard just served steps again (a run sleeps 1 ms between
    // steps): both shards have records then, the other one since it was refused the slot.
    uint64_t steps = rig.s.steps_of(shard);
    for (int t = 0; t < 400 && rig.s.steps_of(shard) == steps; ++t)
      REQUIRE(rig.s.turn(5ms));
    REQUIRE(rig.s.steps_of(shard) > steps);
    CHECK(rig.next_appends().empty());  // a window of one
    uint64_t last = a.first_lsn.value() + a.records.size() - 1;
    rig.server.send(proto::durable{0, {{a.head.shard, a.head.epoch, proto::lsn_t{last}}}});
  }
  // From the first slot both had records for, the shards alternate (starting from the lowest
  // shard each time, shard 0 would take every slot while its run goes on).
  for (size_t i = 2; i < order.size(); ++i)
    CHECK_MESSAGE(order[i] != order[i - 1],
                  "APPEND " << i << " went to shard " << order[i] << " again");
}
