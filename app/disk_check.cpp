#include "app/disk_check.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include <fcntl.h>

#include "actors/wal/file_io.hpp"
#include "app/halt_polling.hpp"

namespace fusee::app {

namespace {

namespace wal = server::wal;

/// n timed pwrite + fdatasync of 4 KiB into a file that is preallocated (zero-filled first, as
/// the log's segments) or grows, with `idle_ms` of idle time before each; microseconds each.
proto::result<std::vector<double>> measure(const wal::fs::path& dir, int n, bool preallocated,
                                           int idle_ms) {
  auto path = dir / "fusee-disk-check.tmp";
  struct cleanup {
    wal::fs::path p;
    ~cleanup() {
      std::error_code ec;
      wal::fs::remove(p, ec);
    }
  } remove_after{path};
  auto f = preallocated ? wal::create_zero_file(path, static_cast<uint64_t>(n) * 4096)
                        : wal::file::open(path, O_RDWR | O_CREAT | O_TRUNC);
  if (!f) return f.err();
  proto::bytes block(4096, 0x5a);
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    if (idle_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(idle_ms));
    auto t0 = std::chrono::steady_clock::now();
    if (auto r = f->write_at(block, static_cast<uint64_t>(i) * block.size(), path); !r)
      return r.err();
    if (auto r = f->sync(path); !r) return r.err();
    out.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return out;
}

}  // namespace

int run_disk_check(const std::string& dir, int runs, int idle_ms) {
  std::error_code ec;
  wal::fs::create_directories(dir, ec);
  struct plan {
    const char* what;
    bool preallocated;
    int runs, idle_ms;
  };
  std::vector<plan> plans{{"overwrite (as the log writes)", true, runs, 0},
                          {"append (growing file)", false, runs, 0}};
  if (idle_ms > 0)
    plans.push_back(
        {"overwrite after idle time (as a cold wake's grant)", true, std::min(runs, 100), idle_ms});
  for (auto& p : plans) {
    auto us = measure(dir, p.runs, p.preallocated, p.idle_ms);
    if (!us) {
      std::fprintf(stderr, "fusee disk-check: %s\n", us.err().message.c_str());
      return 1;
    }
    std::sort(us->begin(), us->end());
    auto pct = [&](double q) { return (*us)[std::min(us->size() - 1, size_t(q * us->size()))]; };
    auto idle = p.idle_ms > 0 ? ", " + std::to_string(p.idle_ms) + " ms idle before each" : "";
    std::printf("%s: fdatasync of 4 KiB in %s, %d runs%s: p50 %.0f us, p99 %.0f us, max %.0f us\n",
                p.what, dir.c_str(), p.runs, idle.c_str(), pct(0.50), pct(0.99), us->back());
  }
  if (auto hint = halt_polling_hint()) std::printf("note: %s\n", hint->c_str());
  return 0;
}

}  // namespace fusee::app
