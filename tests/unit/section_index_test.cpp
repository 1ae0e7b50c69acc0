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
  // Grows to many chunks; drops take the oldest segment (any offset within a chunk) and now and
  // then everything, so the first chunk's dropped part, chunk boundaries and resets all come up.
  std::mt19937_64 rng{14};
  section_index idx;
  std::vector<section_ref> model;
  uint64_t lsn = 1, segment = 1;
  size_t largest = 0;
  for (int op = 0; op < 30000; ++op) {
    auto dice = rng() % 1000;
    if (dice >= 6) {
      // Sections of 1-3 records; a new segment every ~37 sections.
      auto count = static_cast<uint32_t>(1 + rng() % 3);
      if (rng() % 37 == 0) ++segment;
      section_ref r{lsn, count, segment, lsn * 7, count * 10ull};
      idx.push_back(r);
      model.push_back(r);
      lsn += count;
    } else if (!model.empty()) {
      uint64_t through = dice == 0 ? segment : model.front().segment;
      idx.drop_through(through);
      model.erase(model.begin(), std::find_if(model.begin(), model.end(),
                                              [&](auto& x) { return x.segment > through; }));
    }
    largest = std::max(largest, model.size());
    if (op % 97 == 0 || dice < 6) {
      check_same(idx, model);
    } else if (!model.empty()) {
      REQUIRE(idx.size() == model.size());
      REQUIRE(idx.back().first_lsn == model.back().first_lsn);
      uint64_t probe = model.front().first_lsn + rng() % (lsn - model.front().first_lsn + 1);
      REQUIRE(idx.find(probe) == model_find(model, probe));
    }
  }
  check_same(idx, model);
  CHECK(largest > 8 * chunk);  // the run did reach many chunks
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

  // Drops of whole chunks leave what is kept in place too (within a chunk: the test below).
  const section_ref* kept = &idx[5 * chunk + 3];
  uint64_t kept_lsn = kept->first_lsn;
  idx.drop_through(idx[5 * chunk + 2].segment - 1);  // every section of segments before it
  REQUIRE(idx.size() == 35 * chunk);
  CHECK(idx.front().segment == 7);
  auto at = idx.find(kept_lsn);
  REQUIRE(at < idx.size());
  CHECK(&idx[at] == kept);
}

TEST_CASE("a section index keeps entries in place when a drop ends inside a chunk") {
  section_index idx;
  for (uint64_t i = 0; i < 4 * chunk; ++i)
    idx.push_back({i + 1, 1, 1 + i / 100, i, 1});  // segments of 100 sections: not chunk-aligned
  idx.drop_through(3);                             // sections 0-299: a chunk and 44 of the next
  REQUIRE(idx.size() == 4 * chunk - 300);
  CHECK(idx.front().first_lsn == 301);
  const section_ref* front = &idx[0];
  const section_ref* last = &idx[idx.size() - 1];
  for (uint64_t i = 4 * chunk; i < 6 * chunk + 5; ++i)  // across two more chunk boundaries
    idx.push_back({i + 1, 1, 1 + i / 100, i, 1});
  CHECK(&idx[0] == front);
  CHECK(&idx[4 * chunk - 301] == last);
  CHECK(idx.find(301) == 0);
  CHECK(idx[idx.find(6 * chunk)].first_lsn == 6 * chunk);
}

TEST_CASE("a moved-from section index is empty and takes new sections") {
  section_index a;
  for (uint64_t i = 0; i < chunk + 3; ++i)
    a.push_back({i + 1, 1, 1, i, 1});
  section_index b{std::move(a)};
  CHECK(b.size() == chunk + 3);
  CHECK(a.empty());  // NOLINT(bugprone-use-after-move): the contract under test
  a.push_back({7, 1, 1, 0, 1});
  REQUIRE(a.size() == 1);
  CHECK(a.front().first_lsn == 7);
  section_index c;
  c = std::move(b);
  CHECK(c.size() == chunk + 3);
  CHECK(b.empty());  // NOLINT(bugprone-use-after-move)
  CHECK(c.back().first_lsn == chunk + 3);
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
