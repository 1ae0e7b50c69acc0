// Test-side worker and client on top of client::connection: awaits specific frames, keeping the
// DURABLE pushes that arrive in between.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <thread>

#include "client/connection.hpp"
#include "server_process.hpp"

namespace fusee::test {

using namespace std::chrono_literals;

struct peer {
  client::connection conn;
  std::map<uint32_t, uint64_t> durable;    ///< shard -> highest DURABLE lsn seen
  std::vector<proto::any_message> pushes;  ///< other pushes seen while waiting

  explicit peer(client::connection c) : conn(std::move(c)) {}

  /// The next frame; DURABLE pushes update `durable` on the way.
  proto::result<proto::any_message> receive_one(std::chrono::milliseconds timeout) {
    auto r = conn.receive(timeout);
    if (r)
      if (auto* d = std::get_if<proto::durable>(&*r))
        for (auto& p : d->positions) {
          auto& v = durable[p.shard.value()];
          CHECK(p.lsn.value() >= v);  // cumulative: never lower
          v = std::max(v, p.lsn.value());
        }
    return r;
  }

  /// The next frame that is not a DURABLE push nor an answer to a pinger's PING (id 0).
  proto::result<proto::any_message> next(std::chrono::milliseconds timeout = 10s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return proto::error{proto::err_code::io, "timed out"};
      auto r = receive_one(left);
      if (!r) return r;
      if (std::holds_alternative<proto::durable>(*r)) continue;
      if (auto* o = std::get_if<proto::ok>(&*r); o && o->id == 0) continue;
      return r;
    }
  }

  /// Awaits a frame of type T; fails the test on anything else.
  template <class T>
  T expect(std::chrono::milliseconds timeout = 10s) {
    auto r = next(timeout);
    if (!r)
      FAIL("expected " << proto::kind_name(static_cast<uint8_t>(T::tag)) << ", got error "
                       << r.err().to_string());
    if (auto* e = std::get_if<proto::err>(&*r); e && T::tag != proto::kind::err)
      FAIL("expected " << proto::kind_name(static_cast<uint8_t>(T::tag)) << ", got ERR " << e->code
                       << " " << e->message);
    auto* t = std::get_if<T>(&*r);
    if (t == nullptr)
      FAIL("expected " << proto::kind_name(static_cast<uint8_t>(T::tag)) << ", got "
                       << proto::kind_name(static_cast<uint8_t>(proto::kind_of(*r))));
    return std::move(*t);
  }

  /// Waits until DURABLE for `shard` reaches `lsn`.
  bool wait_durable(uint32_t shard, uint64_t lsn, std::chrono::milliseconds timeout = 10s) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (durable[shard] < lsn) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      auto r = receive_one(left);
      if (!r) return false;
      if (!std::holds_alternative<proto::durable>(*r)) pushes.push_back(std::move(*r));
    }
    return true;
  }

  proto::lease hello(uint32_t offers = proto::offer_serve_calls, uint32_t max_shards = 0,
                     const std::string& name = "test-worker") {
    proto::hello h;
    h.head.id = 1;
    h.offers = offers;
    h.max_shards = max_shards;
    h.name = name;
    REQUIRE(conn.send(h));
    return expect<proto::lease>();
  }

  void append(uint32_t shard, uint64_t epoch, uint64_t first, std::vector<proto::bytes> records,
              uint64_t id = 0) {
    proto::append a{proto::request_head{id, proto::shard_id{shard}, proto::epoch_t{epoch}},
                    proto::lsn_t{first}, std::move(records)};
    REQUIRE(conn.send(a));
  }

  void ping(uint64_t id = 99) { REQUIRE(conn.send(proto::ping{proto::request_head{id}})); }
};

/// A server on a fresh data dir, started with `toml` as its configuration.
struct server_fixture {
  temp_dir tmp;
  server_process server;
  explicit server_fixture(std::string toml = "[server]\nshards = 4\n")
      : server(tmp.path() / "data", std::move(toml)) {
    auto err = server.start();
    REQUIRE_MESSAGE(err.empty(), err);
  }
  peer connect() { return peer{server.connect()}; }
};

/// The epoch a grant list gives `shard`, or 0.
inline uint64_t epoch_of(const std::vector<proto::grant_entry>& grants, uint32_t shard) {
  for (auto& g : grants)
    if (g.shard.value() == shard) return g.epoch.value();
  return 0;
}

/// Keeps a connection alive: sends PING every `every` from its own thread (pacing, not syncing).
class pinger {
public:
  pinger(client::connection& c, std::chrono::milliseconds every)
      : thread_([&c, every, this] {
          while (!stop_) {
            c.send(proto::ping{proto::request_head{0}});
            std::this_thread::sleep_for(every);
          }
        }) {}
  ~pinger() {
    stop_ = true;
    thread_.join();
  }

private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

inline proto::bytes record(const std::string& s) {
  return proto::bytes(s.begin(), s.end());
}

/// Reads every durable record of `shard` after `after` through RECOVER_LOG pages.
inline std::vector<proto::bytes> recover_all(peer& p, uint32_t shard, uint64_t epoch,
                                             uint64_t after = 0, uint32_t max_bytes = 1 << 20) {
  std::vector<proto::bytes> out;
  for (uint64_t id = 1000;; ++id) {
    REQUIRE(p.conn.send(
        proto::recover_log{proto::request_head{id, proto::shard_id{shard}, proto::epoch_t{epoch}},
                           proto::lsn_t{after + out.size()}, max_bytes}));
    auto page = p.expect<proto::log_page>();
    CHECK(page.id == id);
    CHECK(page.first_lsn.value() == after + out.size() + 1);
    for (auto& r : page.records)
      out.push_back(std::move(r));
    if (!page.more) return out;
    REQUIRE_FALSE(page.records.empty());
  }
}

}  // namespace fusee::test
