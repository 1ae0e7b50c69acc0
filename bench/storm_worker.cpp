// The timer storm's worker: takes every shard, reports in one IDLE that each is due again in
// DUE_MS, and leaves. The server then holds SHARDS timers that fire together. Prints the Unix
// times in ms at which the IDLE was written (the timers count from its arrival, a moment later:
// encoding and writing a million entries takes this client about a second) and at which it closed
// the connection.
//   storm_worker HOST:PORT SHARDS DUE_MS
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/address_arg.hpp"
#include "client/connection.hpp"

using namespace fusee;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: storm_worker HOST:PORT SHARDS DUE_MS\n");
    return 2;
  }
  std::string addr = argv[1];
  size_t shards = std::stoul(argv[2]);
  uint64_t due_ms = std::stoull(argv[3]);
  auto at = bench::address_arg(addr.c_str());
  auto c = client::connection::open(at.host, at.port);
  if (!c) {
    std::fprintf(stderr, "storm_worker: %s\n", c.err().message.c_str());
    return 1;
  }
  auto lease = client::hello(*c, 0, 0, "storm-worker", std::chrono::seconds(30));
  if (!lease) {
    std::fprintf(stderr, "storm_worker: %s\n", lease.err().message.c_str());
    return 1;
  }
  std::vector<proto::grant_entry> held = lease->grants;
  // A worker that says nothing for timeout_ms (5 s) is taken for dead: it pings every second
  // while it waits (for a million grants, or the IDLE's OK, on a slow machine).
  uint64_t next_ping_id = 1000;
  auto last_ping = std::chrono::steady_clock::now();
  auto ping_if_due = [&] {
    if (std::chrono::steady_clock::now() - last_ping < std::chrono::seconds(1)) return;
    c->send(proto::ping{proto::request_head{next_ping_id++}});
    last_ping = std::chrono::steady_clock::now();
  };
  // The next message, pinging meanwhile; an error once 30 s have passed since `since` without one.
  auto receive_pinging = [&](std::chrono::steady_clock::time_point since) {
    for (;;) {
      ping_if_due();
      auto m = c->receive(std::chrono::seconds(1));
      if (m || !c->timed_out() ||
          std::chrono::steady_clock::now() - since >= std::chrono::seconds(30))
        return m;
    }
  };
  while (held.size() < shards) {  // shards still held by the start-up wave's workers come later
    auto m = receive_pinging(std::chrono::steady_clock::now());
    if (!m) {
      std::fprintf(stderr, "storm_worker: holds %zu of %zu shards: %s\n", held.size(), shards,
                   m.err().message.c_str());
      return 1;
    }
    if (auto* g = std::get_if<proto::grant>(&*m))
      held.insert(held.end(), g->grants.begin(), g->grants.end());
  }
  proto::idle idle{proto::request_head{2}, {}};
  for (auto& g : held)
    idle.entries.push_back(proto::idle_entry{g.shard, g.epoch, 0, due_ms, 0, 0, {}});
  auto unix_ms = [] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  };
  c->send(idle);
  auto reported = unix_ms();
  for (auto asked = std::chrono::steady_clock::now();;) {
    auto m = receive_pinging(asked);  // the PINGs' OKs come too: 30 s in all for the IDLE's
    if (!m) {
      std::fprintf(stderr, "storm_worker: no OK for the IDLE of %zu shards: %s\n", held.size(),
                   m.err().message.c_str());
      return 1;
    }
    if (auto* ok = std::get_if<proto::ok>(&*m); ok && ok->id == 2) break;  // not a PING's
    if (auto* e = std::get_if<proto::err>(&*m)) {
      std::fprintf(stderr, "storm_worker: the IDLE of %zu shards refused: %s\n", held.size(),
                   e->message.c_str());
      return 1;
    }
  }
  c->close();
  std::printf("%lld %lld\n", reported, unix_ms());
  return 0;
}
