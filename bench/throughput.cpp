// Throughput: W workers, each holding S/W shards, append 100-byte records with a bounded
// number of records in flight per shard, for D seconds. Reports durable records per second and
// the longest any worker waited for a DURABLE (a stall of the server's commits shows there).
//   throughput HOST:PORT workers seconds [in_flight_per_shard] [record_bytes] [shards] [writes]
// Each worker connection takes shards/workers shards (max_shards), so all of them work. `writes`:
// `turn` (the default) writes the APPENDs of one turn of a worker's loop with one send, as the
// workflow runtime does; `frame` sends each APPEND on its own (what this bench did before).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/address_arg.hpp"
#include "client/connection.hpp"

using namespace fusee;

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: throughput HOST:PORT workers seconds [in_flight] [bytes]\n");
    return 2;
  }
  std::string addr = argv[1];
  int workers = std::stoi(argv[2]);
  double seconds = std::stod(argv[3]);
  uint64_t in_flight = argc > 4 ? std::stoull(argv[4]) : 8;
  size_t size = argc > 5 ? std::stoul(argv[5]) : 100;
  uint32_t shards = argc > 6 ? static_cast<uint32_t>(std::stoul(argv[6])) : 64;
  std::string writes = argc > 7 ? argv[7] : "turn";
  if (writes != "turn" && writes != "frame") {
    std::fprintf(stderr, "throughput: writes must be turn or frame, not %s\n", writes.c_str());
    return 2;
  }
  bool per_turn = writes == "turn";
  auto at = bench::address_arg(addr.c_str());
  std::string host = at.host;
  auto port = at.port;

  std::vector<client::connection> conns;
  std::vector<proto::lease> leases;
  for (int w = 0; w < workers; ++w) {
    auto c = client::connection::open(host, port);
    if (!c) return 1;
    conns.push_back(std::move(*c));
  }
  for (int w = 0; w < workers; ++w) {
    auto l = client::hello(conns[w], 0, (shards + workers - 1) / workers, "bench-tp");
    if (!l) return 1;
    leases.push_back(*l);
  }
  std::atomic<uint64_t> durable_total{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  std::mutex longest_mtx;
  // The longest wait for a DURABLE, any worker.
  std::chrono::steady_clock::duration longest_wait{};
  auto t0 = std::chrono::steady_clock::now();
  for (int w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      auto& c = conns[w];
      auto& l = leases[w];
      std::map<uint32_t, uint64_t> next, durable, epoch;
      for (auto& g : l.grants) {
        next[g.shard.value()] = g.durable_lsn.value() + 1;
        durable[g.shard.value()] = g.durable_lsn.value();
        epoch[g.shard.value()] = g.epoch.value();
      }
      proto::bytes rec(size, 'y');
      uint64_t mine = 0;
      proto::bytes out;
      std::chrono::steady_clock::duration longest{};
      std::optional<std::chrono::steady_clock::time_point> waiting_since;
      while (!stop) {
        for (auto& [s, n] : next) {
          uint64_t free = in_flight - (n - 1 - durable[s]);
          if (free == 0) continue;
          std::vector<proto::bytes> recs(free, rec);
          auto frame = proto::encode(
              proto::append{proto::request_head{0, proto::shard_id{s}, proto::epoch_t{epoch[s]}},
                            proto::lsn_t{n}, std::move(recs)});
          if (per_turn)
            out.insert(out.end(), frame.begin(), frame.end());
          else
            c.send_raw(frame);
          n += free;
        }
        if (!out.empty()) {
          c.send_raw(out);
          out.clear();
        }
        // The first answer waits; the ones that came with it are taken at once. A wait that
        // times out goes on counting from where it began.
        if (!waiting_since) waiting_since = std::chrono::steady_clock::now();
        for (auto wait = std::chrono::milliseconds(100);; wait = std::chrono::milliseconds(0)) {
          auto r = c.receive(wait);
          if (!r) break;
          if (wait.count() > 0) {
            longest = std::max(longest, std::chrono::steady_clock::now() - *waiting_since);
            waiting_since.reset();
          }
          if (auto* d = std::get_if<proto::durable>(&*r))
            for (auto& p : d->positions) {
              auto& cur = durable[p.shard.value()];
              mine += p.lsn.value() - cur;
              cur = p.lsn.value();
            }
          if (!per_turn || c.buffered() == 0) break;
        }
      }
      durable_total += mine;
      std::lock_guard<std::mutex> lk{longest_mtx};
      longest_wait = std::max(longest_wait, longest);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads)
    t.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"workers\":%d,\"records\":%llu,\"seconds\":%.2f,\"records_per_s\":%.0f,"
              "\"longest_wait_us\":%.0f}\n",
              workers, (unsigned long long)durable_total.load(), elapsed,
              durable_total.load() / elapsed,
              std::chrono::duration<double, std::micro>(longest_wait).count());
  return 0;
}
