// The zero-filled files segments start as: paced (the spare, filled while the log commits) or
// at once, every byte is a zero, the size exact, the file open for the log's writes.
#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

#include "actors/wal/file_io.hpp"
#include "test_util.hpp"

using namespace fusee;
using namespace fusee::server::wal;
using fusee::test::temp_dir;

namespace {

/// The file at `path` is `size` zero bytes.
void check_zeros(const fs::path& path, uint64_t size) {
  auto all = read_file(path);
  REQUIRE(all);
  CHECK(all->size() == size);
  CHECK(std::all_of(all->begin(), all->end(), [](uint8_t b) { return b == 0; }));
}

}  // namespace

TEST_CASE("a paced zero fill writes the whole file in zeros, chunk by chunk, and returns it open") {
  temp_dir tmp;
  auto path = tmp.path / "next.prep";
  uint64_t size = 3 * zero_fill_chunk + 100;  // a short last chunk too
  std::vector<uint64_t> asked;                // the pace is asked after each chunk is written out
  auto f = create_zero_file(path, size, [&](uint64_t filled) {
    asked.push_back(filled);
    return asked.size() % 2 ? fill_step::pause : fill_step::go_on;
  });
  REQUIRE_MESSAGE(f, (f ? "" : f.err().message));
  CHECK(asked ==
        std::vector<uint64_t>{zero_fill_chunk, 2 * zero_fill_chunk, 3 * zero_fill_chunk, size});
  check_zeros(path, size);
  REQUIRE(f->write_at(proto::as_bytes(std::string_view{"batch"}), 10, path));
  auto after = read_file(path);
  REQUIRE(after);
  CHECK(after->size() == size);  // written into, not grown
  CHECK((*after)[10] == 'b');
}

TEST_CASE("a paced zero fill told to stop fails naming the file and writes no more") {
  temp_dir tmp;
  auto path = tmp.path / "next.prep";
  int asked = 0;
  auto f = create_zero_file(path, 10 * zero_fill_chunk, [&](uint64_t) {
    return ++asked == 2 ? fill_step::stop : fill_step::go_on;
  });
  REQUIRE_FALSE(f);
  CHECK(f.err().message.find("next.prep") != std::string::npos);
  CHECK(asked == 2);
  CHECK(fs::file_size(path) == 2 * zero_fill_chunk);
}

TEST_CASE("a zero fill not paced writes the same zeros") {
  temp_dir tmp;
  uint64_t size = 2 * zero_fill_chunk + 7;
  REQUIRE(create_zero_file(tmp.path / "at_once", size));
  check_zeros(tmp.path / "at_once", size);
}

TEST_CASE("a zero fill into a directory that does not exist fails naming the file") {
  temp_dir tmp;
  auto f = create_zero_file(tmp.path / "no" / "next.prep", 100,
                            [](uint64_t) { return fill_step::go_on; });
  REQUIRE_FALSE(f);
  CHECK(f.err().message.find("next.prep") != std::string::npos);
}

TEST_CASE("a paced zero fill whose write-out fails says so, naming the file") {
  // The bytes are taken (/dev/null takes any write), but sync_file_range refuses a character
  // device (ESPIPE): the error a disk's failed write-out would be, on the same path.
  auto f = create_zero_file("/dev/null", 2 * zero_fill_chunk, [](uint64_t) {
    FAIL("the pace is asked only after a chunk is written out");
    return fill_step::go_on;
  });
  REQUIRE_FALSE(f);
  CHECK(f.err().code == proto::err_code::io);
  CHECK(f.err().message.find("write out /dev/null") != std::string::npos);
}
