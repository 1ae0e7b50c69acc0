// The timer storm's worker: takes every shard, reports in one IDLE that each is due again in
// DUE_MS, and leaves. The server then holds SHARDS timers that fire together. Prints the Unix
// times in ms at which the IDLE was written (the timers count from its arrival, a moment later:
// encoding and writing a million entries takes this client 1-2 s) and at which it closed the
// connection; on stderr, how long the LEASE, the grants and the IDLE took.
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
  // A worker that says nothing for timeout_ms (5 s) after its LEASE is taken for dead: it pings
  // every second while it waits (for the grants after its LEASE, the IDLE's OK).
  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t) {
    return static_cast<long long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - t).count());
  };
  uint64_t next_ping_id = 1000;
  auto last_ping = clock::now();
  auto ping = [&] {
    c->send(proto::ping{proto::request_head{next_ping_id++}});
    last_ping = clock::now();
  };
  auto ping_if_due = [&] {
    if (clock::now() - last_ping >= std::chrono::seconds(1)) ping();
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
  auto hello_at = clock::now();
  if (!client::send_hello(*c, 0, 0, "storm-worker", proto::invocation_id{0}, {})) {
    std::fprintf(stderr, "storm_worker: cannot send HELLO\n");
    return 1;
  }
  // Silent until the LEASE, as PROTOCOL.md §3 allows (liveness applies from the LEASE on): a
  // server that counted its own delay as the worker's silence would revoke it here.
  auto lease = client::lease_of(c->receive(std::chrono::seconds(30)));
  if (!lease) {
    std::fprintf(stderr, "storm_worker: no LEASE %lld ms after HELLO: %s\n", ms_since(hello_at),
                 lease.err().message.c_str());
    return 1;
  }
  std::fprintf(stderr, "storm_worker: LEASE of %zu shards %lld ms after HELLO\n",
               lease->grants.size(), ms_since(hello_at));
  std::vector<proto::grant_entry> held = std::move(lease->grants);
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
  auto grants_ms = ms_since(hello_at);
  proto::idle idle{proto::request_head{2}, {}};
  for (auto& g : held)
    idle.entries.push_back(proto::idle_entry{g.shard, g.epoch, 0, due_ms, 0, 0, {}});
  auto unix_ms = [] {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
  };
  // Encoded first, then a PING, then written: the server hears from it while it encodes.
  auto encode_from = clock::now();
  auto frame = proto::encode(idle);
  ping();
  c->send_raw(frame);
  auto reported = unix_ms();
  std::fprintf(stderr,
               "storm_worker: all %zu grants %lld ms after HELLO; IDLE of %zu bytes "
               "encoded and written in %lld ms\n",
               held.size(), grants_ms, frame.size(), ms_since(encode_from));
  for (auto asked = std::chrono::steady_clock::now();;) {
    auto m = receive_pinging(asked);  // the PINGs' OKs come too: 30 s in all for the IDLE's
    if (!m) {
      std::fprintf(stderr, "storm_worker: no OK for the IDLE of %zu shards %lld ms after it: %s\n",
                   held.size(), ms_since(asked), m.err().message.c_str());
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
