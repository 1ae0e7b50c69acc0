// Cold wake: a client calls a shard nobody holds; the server invokes the endpoint (fusee
// handler), which connects back, leases the shard and answers the call. Reports the total and
// the server's share (total less the handler's own time, which it puts in its answer), and the
// share's three legs at p50 and p99: call -> POST arrives (until the handler has the whole
// request), HELLO -> LEASE, and the answer's way back (the rest: CALL_REPLY -> server ->
// CALL_RESULT), so a tail can be placed. The share counts this client's wake-up for the
// CALL_RESULT (in the way back) and not what the handler's time holds: its signature check,
// its TCP connect back, the wait from its LEASE to the RELAYED_CALL (printed beside the share as
// `relay`, not added; it holds the handler's own wake-up too). A leg's p99 is its own: the p99s
// of the legs do not add up to the share's.
//   cold_wake HOST:PORT shards calls
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bench/address_arg.hpp"
#include "client/connection.hpp"

using namespace fusee;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: cold_wake HOST:PORT shards calls\n");
    return 2;
  }
  std::string addr = argv[1];
  uint32_t shards = static_cast<uint32_t>(std::stoul(argv[2]));
  int calls = std::stoi(argv[3]);
  auto at = bench::address_arg(addr.c_str());
  auto c = client::connection::open(at.host, at.port);
  if (!c) return 1;
  c->send(proto::client_hello{proto::request_head{1}, 1, "bench-cold"});
  if (!c->receive(std::chrono::seconds(5))) return 1;
  std::vector<double> total, server;
  std::vector<double> to_post, lease, back;  ///< the legs of the server's share
  std::vector<double> relay;                 ///< LEASE -> RELAYED_CALL, outside the share
  for (int i = 0; i < calls; ++i) {
    // Each call goes to a shard whose last invocation has ended (the handler lingers 100 ms).
    uint32_t shard = static_cast<uint32_t>(i) % shards;
    auto t0 = std::chrono::steady_clock::now();
    c->send(proto::call{proto::request_head{static_cast<uint64_t>(i + 10), proto::shard_id{shard},
                                            proto::epoch_t{0}},
                        "ping", "", proto::bytes{'{', '}'}, 10000});
    auto r = c->receive(std::chrono::seconds(20));
    auto us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    auto* res = r ? std::get_if<proto::call_result>(&*r) : nullptr;
    if (!res || res->status != 0) {
      std::fprintf(stderr, "call %d failed\n", i);
      return 1;
    }
    std::string body(res->body.begin(), res->body.end());
    auto field = [&](const std::string& name, double missing = 0) {
      auto p = body.find("\"" + name + "\":");
      return p == std::string::npos ? missing : std::stod(body.substr(p + name.size() + 3));
    };
    double handler_us = field("handler_us");
    total.push_back(us);
    server.push_back(us - handler_us);
    // steady_clock is CLOCK_MONOTONIC, one clock for every process on the machine.
    double sent_us = static_cast<double>(
        std::chrono::duration_cast<std::chrono::microseconds>(t0.time_since_epoch()).count());
    to_post.push_back(field("post_at_us") - sent_us);
    lease.push_back(field("lease_us"));
    back.push_back(server.back() - to_post.back() - lease.back());
    if (double r = field("since_lease_us", -1); r >= 0) relay.push_back(r);    // older: none
    std::this_thread::sleep_for(std::chrono::milliseconds(400 / shards + 1));  // let it end
  }
  auto pct = [](std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
  };
  std::printf("{\"calls\":%d,\"total_p50_us\":%.0f,\"total_p99_us\":%.0f,\"server_p50_us\":%.0f,"
              "\"server_p99_us\":%.0f,\"call_to_post_p50_us\":%.0f,\"call_to_post_p99_us\":%.0f,"
              "\"lease_p50_us\":%.0f,\"lease_p99_us\":%.0f,\"back_p50_us\":%.0f,"
              "\"back_p99_us\":%.0f",
              calls, pct(total, 0.5), pct(total, 0.99), pct(server, 0.5), pct(server, 0.99),
              pct(to_post, 0.5), pct(to_post, 0.99), pct(lease, 0.5), pct(lease, 0.99),
              pct(back, 0.5), pct(back, 0.99));
  if (relay.size() == total.size())
    std::printf(",\"relay_p50_us\":%.0f,\"relay_p99_us\":%.0f", pct(relay, 0.5), pct(relay, 0.99));
  std::printf("}\n");
  return 0;
}
