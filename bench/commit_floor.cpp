// The machine's floor for group-commit throughput, without fusee: CONNS client threads keep
// IN_FLIGHT records (RECORD bytes each) awaiting durability in all, as bench/throughput does
// against fusee; one server thread reads whatever arrived on any connection, appends it with one
// pwrite + fdatasync (laid out as fusee's log lays out one-record appends: a 24-byte batch head,
// 29 bytes of head per record; at more than one record per append fusee writes a little less),
// answers each connection with the count made durable, and starts again. No framing, no log, no
// actors, and a client that answers at once: an anchor for what a plain group-commit server
// reaches on this machine with this client pattern (docs/benchmarks.md, "Fourth session").
// mode: serial  — write, fdatasync, answer, read again;
//       overlap — when answers are owed and more arrived: write the next batch and start its
//                 disk write, send the owed answers, then fdatasync (what fusee's log does
//                 with two or more I/O threads);
//       pipeline — two server threads, each commits what it read at once: writes one at a time,
//                 fdatasyncs side by side (does the disk take a write while a flush runs?).
//   commit_floor DIR [seconds] [conns] [in_flight] [record_bytes] [serial|overlap|pipeline]
// Prints one JSON line: records/s, records per fsync and the commit's (write + fdatasync) p50
// in microseconds.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench/floor_parts.hpp"

namespace {

struct server_stats {
  uint64_t records = 0;
  uint64_t commits = 0;
  std::vector<double> commit_us;
};

/// Reads what `fd` has (without blocking), counting the bytes into `bytes`; true once its peer
/// closed or the read failed.
bool read_all(int fd, std::vector<char>& buf, uint64_t& bytes) {
  for (;;) {
    ssize_t r = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT);
    if (r > 0) {
      bytes += static_cast<uint64_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    return r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK);
  }
}

/// Serves `conns` (non-blocking) until all of them closed: each turn reads everything readable,
/// commits it and answers (with `overlap`, the answers of a commit wait for the next one's write).
server_stats serve(const std::vector<int>& conns, bench::floor_disk& d, size_t record,
                   bool overlap) {
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  for (size_t i = 0; i < conns.size(); ++i) {
    epoll_event ev{EPOLLIN, {.u64 = i}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i], &ev);
  }
  using clock = std::chrono::steady_clock;
  std::vector<uint64_t> partial(conns.size(), 0), pending(conns.size(), 0), owed(conns.size(), 0);
  bool owing = false;
  auto answer = [&](std::vector<uint64_t>& counts) {
    for (size_t i = 0; i < conns.size(); ++i)
      if (counts[i] > 0) {
        (void)!::send(conns[i], &counts[i], sizeof(counts[i]), MSG_NOSIGNAL);
        counts[i] = 0;
      }
  };
  std::vector<char> buf(1 << 16);
  std::vector<epoll_event> ready(conns.size());
  size_t open = conns.size();
  server_stats st;
  while (open > 0) {
    int n = ::epoll_wait(ep, ready.data(), static_cast<int>(ready.size()), owing ? 0 : -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    uint64_t batch = 0;
    for (int k = 0; k < n; ++k) {
      size_t i = ready[k].data.u64;
      if (read_all(conns[i], buf, partial[i])) {
        ::epoll_ctl(ep, EPOLL_CTL_DEL, conns[i], nullptr);
        --open;
      }
      pending[i] += partial[i] / record;
      partial[i] %= record;
      batch += pending[i];
    }
    if (batch == 0) {
      if (owing) answer(owed);
      owing = false;
      continue;
    }
    auto t0 = clock::now();
    d.write(24 + batch * (29 + record), owing);
    auto written = clock::now() - t0;
    if (owing) answer(owed);
    t0 = clock::now();
    d.sync();
    st.commit_us.push_back(
        std::chrono::duration<double, std::micro>(written + (clock::now() - t0)).count());
    st.records += batch;
    st.commits++;
    if (overlap) {
      owed.swap(pending);
      owing = true;
    } else {
      answer(pending);
    }
  }
  ::close(ep);
  return st;
}

/// `pipeline`: two server threads share the connections (one-shot epoll), each commits what it
/// read as soon as it read it: the writes take turns (whichever thread gets the lock first; each
/// starts its disk write with sync_file_range), the fdatasyncs do not, so one batch's write can
/// go to the disk while the other's flush is in flight. A commit's time counts from its write.
server_stats serve_pipelined(const std::vector<int>& conns, bench::floor_disk& d, size_t record) {
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  for (size_t i = 0; i < conns.size(); ++i) {
    epoll_event ev{EPOLLIN | EPOLLONESHOT, {.u64 = i}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i], &ev);
  }
  std::vector<uint64_t> partial(conns.size(), 0);
  std::atomic<size_t> open{conns.size()};
  std::mutex write_mtx;
  server_stats st;
  std::mutex st_mtx;
  auto run = [&] {
    std::vector<char> buf(1 << 16);
    std::vector<epoll_event> ready(conns.size());
    std::vector<uint64_t> counts(conns.size(), 0);
    while (open.load() > 0) {
      int n = ::epoll_wait(ep, ready.data(), static_cast<int>(ready.size()), 50);
      if (n <= 0) continue;
      uint64_t batch = 0;
      for (int k = 0; k < n; ++k) {
        size_t i = ready[k].data.u64;
        bool closed = read_all(conns[i], buf, partial[i]);
        counts[i] += partial[i] / record;
        partial[i] %= record;
        batch += counts[i];
        if (closed) {
          --open;
        } else {
          epoll_event ev{EPOLLIN | EPOLLONESHOT, {.u64 = i}};
          ::epoll_ctl(ep, EPOLL_CTL_MOD, conns[i], &ev);
        }
      }
      if (batch == 0) continue;
      std::chrono::steady_clock::time_point t0;
      {
        std::lock_guard<std::mutex> lk{write_mtx};
        t0 = std::chrono::steady_clock::now();
        d.write(24 + batch * (29 + record), true);
      }
      d.sync();
      double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      for (size_t i = 0; i < conns.size(); ++i)
        if (counts[i] > 0) {
          (void)!::send(conns[i], &counts[i], sizeof(counts[i]), MSG_NOSIGNAL);
          counts[i] = 0;
        }
      std::lock_guard<std::mutex> lk{st_mtx};
      st.records += batch;
      st.commits++;
      st.commit_us.push_back(us);
    }
  };
  std::thread other(run);
  run();
  other.join();
  ::close(ep);
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: commit_floor DIR [seconds] [conns] [in_flight] [record_bytes] "
                         "[serial|overlap|pipeline]\n");
    return 2;
  }
  std::string dir = argv[1];
  double seconds = argc > 2 ? std::stod(argv[2]) : 5;
  int conns = argc > 3 ? std::stoi(argv[3]) : 4;
  uint64_t in_flight = argc > 4 ? std::stoull(argv[4]) : 64;
  size_t record = argc > 5 ? std::stoul(argv[5]) : 100;
  std::string mode = argc > 6 ? argv[6] : "serial";
  if (mode != "serial" && mode != "overlap" && mode != "pipeline") {
    std::fprintf(stderr, "commit_floor: mode must be serial, overlap or pipeline, not %s\n",
                 mode.c_str());
    return 2;
  }
  if (conns < 1 || in_flight < static_cast<uint64_t>(conns) || record == 0) {
    std::fprintf(stderr, "commit_floor: need conns >= 1, in_flight >= conns, record_bytes >= 1\n");
    return 2;
  }
  bench::floor_disk d{dir, "commit_floor"};
  sockaddr_in addr;
  int lfd = bench::listen_loopback(addr, conns);
  std::vector<int> client(conns), server(conns);
  int one = 1;
  for (int i = 0; i < conns; ++i) {
    client[i] = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ::setsockopt(client[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(client[i], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror("commit_floor: connect");
      return 1;
    }
    server[i] = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    ::setsockopt(server[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ::close(lfd);
  server_stats st;
  std::thread srv([&] {
    st = mode == "pipeline" ? serve_pipelined(server, d, record)
                            : serve(server, d, record, mode == "overlap");
  });

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> durable{0};
  std::vector<std::thread> workers;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < conns; ++i)
    workers.emplace_back([&, i] {
      // This connection's share of the records in flight; each turn sends as many as came back
      // with one send, as bench/throughput's turns do.
      uint64_t mine = in_flight / conns + (static_cast<uint64_t>(i) < in_flight % conns ? 1 : 0);
      std::vector<char> out(mine * record, 'y');
      uint64_t free = mine, done = 0;
      while (!stop) {
        if (::send(client[i], out.data(), free * record, MSG_NOSIGNAL) !=
            static_cast<ssize_t>(free * record))
          break;
        uint64_t n = 0;
        if (!bench::read_full(client[i], reinterpret_cast<char*>(&n), sizeof(n))) break;
        done += n;
        free = n;
      }
      durable += done;
      ::shutdown(client[i], SHUT_WR);
    });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& w : workers)
    w.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  srv.join();
  for (int i = 0; i < conns; ++i) {
    ::close(client[i]);
    ::close(server[i]);
  }
  auto& us = st.commit_us;
  std::sort(us.begin(), us.end());
  std::printf("{\"mode\":\"%s\",\"conns\":%d,\"in_flight\":%llu,\"records_per_s\":%.0f,"
              "\"records_per_fsync\":%.1f,\"commit_p50_us\":%.1f}\n",
              mode.c_str(), conns, static_cast<unsigned long long>(in_flight),
              durable.load() / elapsed,
              st.commits ? static_cast<double>(st.records) / st.commits : 0.0,
              us.empty() ? 0.0 : us[us.size() / 2]);
  return 0;
}
