// The log's per-shard section index: the answers of a sorted vector, through the lone first
// chunk's growth, chunk boundaries and drops from the front, with no stored entry ever moved.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "actors/wal/section_index.hpp"

using fusee::server::wal::section_index;
using fusee::server::wal::section_ref;

namespace {

constexpr size_t chunk = section_index::chunk_size;

/// What find() must answer, from a plain sorted vector.
size_t model_find(const std::vector<section_ref>& m, uint64_t lsn) {
  auto it = std::upper_bound(m.begin(), m.end(), lsn,
                             [](uint64_t v, const section_ref& x) { return v < x.first_lsn; });
  return it == m.begin() ? m.size() : static_cast<size_t>(it - m.begin()) - 1;
}

void check_same(const section_index& idx, const std::vector<section_ref>& m) {
  REQUIRE(idx.size() == m.size());
  CHECK(idx.empty() == m.empty());
  for (size_t i = 0; i < m.size(); ++i) {
    REQUIRE(idx[i].first_lsn == m[i].first_lsn);
    REQUIRE(idx[i].segment == m[i].segment);
    REQUIRE(idx[i].offset == m[i].offset);
  }
  if (m.empty()) return;
  for (uint64_t lsn : {uint64_t{0}, m.front().first_lsn, m.front().first_lsn + 1,
                       m[m.size() / 2].first_lsn, m.back().first_lsn, m.back().first_lsn + 100})
    REQUIRE(idx.find(lsn) == model_find(m, lsn));
}

}  // namespace

TEST_CASE("a section index answers as a sorted vector does through growth and drops") {
  std::mt19937_64 rng{14};
  section_index idx;
  std::vector<section_ref> model;
  uint64_t lsn = 1, segment = 1;
  for (int op = 0; op < 4000; ++op) {
    if (rng() % 10 < 8) {
      // Sections of 1-3 records; a new segment now and then.
      auto count = static_cast<uint32_t>(1 + rng() % 3);
      if (rng() % 40 == 0) ++segment;
      section_ref r{lsn, count, segment, lsn * 7, count * 10ull};
      idx.push_back(r);
      model.push_back(r);
      lsn += count;
    } else if (!model.empty()) {
      // Retire through a segment at or before the newest (sometimes all of them).
      uint64_t through = model.front().segment + rng() % (segment - model.front().segment + 2);
      idx.drop_through(through);
      model.erase(model.begin(), std::find_if(model.begin(), model.end(),
                                              [&](auto& x) { return x.segment > through; }));
    }
    check_same(idx, model);
  }
}

TEST_CASE("a section index finds nothing before its first section and in an empty index") {
  section_index idx;
  CHECK(idx.find(5) == 0);  // size(): nothing held
  idx.push_back({10, 2, 1, 0, 0});
  idx.push_back({12, 1, 1, 0, 0});
  CHECK(idx.find(9) == idx.size());
  CHECK(idx.find(10) == 0);
  CHECK(idx.find(11) == 0);
  CHECK(idx.find(12) == 1);
  CHECK(idx.find(1000) == 1);
}

TEST_CASE("a section index never moves a stored section once its first chunk is full") {
  // A vector growing by doubling would copy every entry to a new allocation (the commit's stall).
  section_index idx;
  for (uint64_t i = 0; i < chunk; ++i)
    idx.push_back({i + 1, 1, 1, i, 1});
  const section_ref* first = &idx[0];
  const section_ref* last_of_first_chunk = &idx[chunk - 1];
  idx.push_back({chunk + 1, 1, 1, chunk, 1});
  const section_ref* second_chunk = &idx[chunk];
  for (uint64_t i = chunk + 1; i < 40 * chunk; ++i)
    idx.push_back({i + 1, 1, 2 + i / chunk, i, 1});
  CHECK(&idx[0] == first);
  CHECK(&idx[chunk - 1] == last_of_first_chunk);
  CHECK(&idx[chunk] == second_chunk);

  // Drops from the front leave what is kept in place too, within a chunk and across whole ones.
  const section_ref* kept = &idx[5 * chunk + 3];
  uint64_t kept_lsn = kept->first_lsn;
  idx.drop_through(idx[5 * chunk + 2].segment - 1);  // every section of segments before it
  REQUIRE(idx.size() == 35 * chunk);
  CHECK(idx.front().segment == 7);
  auto at = idx.find(kept_lsn);
  REQUIRE(at < idx.size());
  CHECK(&idx[at] == kept);
}

TEST_CASE("a section index dropped to nothing starts again from a small first chunk") {
  section_index idx;
  for (uint64_t i = 0; i < 3 * chunk; ++i)
    idx.push_back({i + 1, 1, 1, i, 1});
  idx.drop_through(1);
  CHECK(idx.empty());
  CHECK(idx.find(1) == 0);
  idx.push_back({3 * chunk + 1, 1, 2, 0, 1});
  REQUIRE(idx.size() == 1);
  CHECK(idx.front().first_lsn == 3 * chunk + 1);
  CHECK(idx.find(3 * chunk + 1) == 0);
}
