// The machine's floor for a durable round trip over loopback, without fusee: a client sends a
// 100-byte request, a server thread writes 4 KiB into a preallocated file, fdatasyncs and answers;
// repeated sequentially. What an ideal server could do on this machine, as an anchor beside the
// disk floor (no network) and fusee's step (docs/benchmarks.md).
//   wire_floor DIR [steps] [mode]
// mode: inline  — the thread that reads the socket writes and syncs (one thread, as PostgreSQL's
//                 backend does);
//       inline-spin — the same, spinning up to 100 µs for the next request before it sleeps;
//       handoff — a reader thread hands each request to a writer thread (condition variable),
//                 which syncs and answers (one hand-off more).
// Prints one JSON line: p50/p99 in microseconds.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
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

constexpr size_t request_size = 100;

/// Waits (epoll, as a server's event loop) until `fd` is readable, then reads one request.
bool next_request(int ep, int fd, char* req) {
  epoll_event ev;
  for (;;) {
    int n = ::epoll_wait(ep, &ev, 1, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    break;
  }
  return bench::read_full(fd, req, request_size);
}

/// Spins up to `spin` for the next request before sleeping in epoll_wait.
void serve_inline(int fd, bench::floor_disk& d, std::chrono::microseconds spin) {
  int ep = ::epoll_create1(0);
  epoll_event ev{EPOLLIN, {.fd = fd}};
  ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  char req[request_size];
  for (;;) {
    bool got = false;
    auto until = std::chrono::steady_clock::now() + spin;
    while (spin.count() > 0 && std::chrono::steady_clock::now() < until) {
      ssize_t n = ::recv(fd, req, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n > 0) {
        got = bench::read_full(fd, req, request_size);
        break;
      }
      if (n == 0) return;
    }
    if (!got && !next_request(ep, fd, req)) break;
    d.commit();
    (void)!::send(fd, req, 16, MSG_NOSIGNAL);
  }
  ::close(ep);
}

void serve_handoff(int fd, bench::floor_disk& d) {
  std::mutex m;
  std::condition_variable cv;
  int pending = 0;
  bool done = false;
  std::thread writer([&] {
    for (;;) {
      {
        std::unique_lock<std::mutex> lk{m};
        cv.wait(lk, [&] { return pending > 0 || done; });
        if (pending == 0 && done) return;
        pending = 0;
      }
      d.commit();
      char ok[16] = {};
      (void)!::send(fd, ok, sizeof(ok), MSG_NOSIGNAL);
    }
  });
  int ep = ::epoll_create1(0);
  epoll_event ev{EPOLLIN, {.fd = fd}};
  ::epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
  char req[request_size];
  while (next_request(ep, fd, req)) {
    {
      std::lock_guard<std::mutex> lk{m};
      pending++;
    }
    cv.notify_one();
  }
  {
    std::lock_guard<std::mutex> lk{m};
    done = true;
  }
  cv.notify_one();
  writer.join();
  ::close(ep);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: wire_floor DIR [steps] [inline|inline-spin|handoff]\n");
    return 2;
  }
  std::string dir = argv[1];
  int steps = argc > 2 ? std::stoi(argv[2]) : 3000;
  std::string mode = argc > 3 ? argv[3] : "inline";
  if (mode != "inline" && mode != "handoff" && mode != "inline-spin") {
    std::fprintf(stderr, "wire_floor: mode must be inline, inline-spin or handoff, not %s\n",
                 mode.c_str());
    return 2;
  }
  bench::floor_disk d{dir, "wire_floor"};
  sockaddr_in addr;
  int lfd = bench::listen_loopback(addr, 1);
  std::thread server([&] {
    int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
    int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (mode == "inline")
      serve_inline(c, d, std::chrono::microseconds(0));
    else if (mode == "inline-spin")
      serve_inline(c, d, std::chrono::microseconds(100));
    else
      serve_handoff(c, d);
    ::close(c);
  });
  int c = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (::connect(c, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("wire_floor: connect");
    return 1;
  }
  std::vector<double> us;
  char req[request_size] = {};
  char ok[16];
  for (int i = 0; i < steps + 100; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    if (::send(c, req, sizeof(req), MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof(req)) ||
        !bench::read_full(c, ok, sizeof(ok))) {
      std::fprintf(stderr, "wire_floor: the server went away\n");
      return 1;
    }
    if (i >= 100)
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  ::shutdown(c, SHUT_RDWR);
  ::close(c);
  server.join();
  ::close(lfd);
  std::sort(us.begin(), us.end());
  std::printf("{\"mode\":\"%s\",\"steps\":%d,\"p50_us\":%.1f,\"p99_us\":%.1f}\n", mode.c_str(),
              steps, us[us.size() / 2], us[us.size() * 99 / 100]);
  return 0;
}
