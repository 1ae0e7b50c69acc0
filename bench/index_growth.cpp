// What growing a shard's section index costs the thread that commits the log: N sections pushed
// one by one into a plain vector (the index before eee2da8) or into wal::section_index; prints the
// longest single push and the total. Run each kind in its own process (fresh memory, as a
// server's growing index mostly gets).
//   index_growth KIND [N]   KIND: vector or section_index; N: sections (default 1,048,576)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "actors/wal/section_index.hpp"

using fusee::server::wal::section_index;
using fusee::server::wal::section_ref;

namespace {

template <class Index>
void measure(const char* kind, size_t n) {
  using clock = std::chrono::steady_clock;
  Index idx;
  double longest = 0;
  size_t longest_at = 0;
  auto start = clock::now();
  for (size_t i = 0; i < n; ++i) {
    auto t0 = clock::now();
    idx.push_back(section_ref{i + 1, 1, 1 + i / 100000, i * 130, 130});
    double us = std::chrono::duration<double, std::micro>(clock::now() - t0).count();
    if (us > longest) {
      longest = us;
      longest_at = i;
    }
  }
  double total_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
  std::printf("{\"index\":\"%s\",\"sections\":%zu,\"longest_push_us\":%.0f,\"at\":%zu,"
              "\"total_ms\":%.1f}\n",
              kind, n, longest, longest_at, total_ms);
}

}  // namespace

int main(int argc, char** argv) {
  std::string kind = argc > 1 ? argv[1] : "";
  size_t n = argc > 2 ? std::stoul(argv[2]) : size_t{1} << 20;
  if (kind == "vector")
    measure<std::vector<section_ref>>("vector", n);
  else if (kind == "section_index")
    measure<section_index>("section_index", n);
  else {
    std::fprintf(stderr, "usage: index_growth vector|section_index [N]\n");
    return 2;
  }
  return 0;
}
