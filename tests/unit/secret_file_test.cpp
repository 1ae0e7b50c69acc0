// A secret or token file: read with its line end trimmed, refused with a reason that says what
// to fix.
#include <doctest/doctest.h>

#include <fstream>

#include "client/secret_file.hpp"
#include "test_util.hpp"

using fusee::client::read_secret_file;
using fusee::test::temp_dir;

TEST_CASE("a secret file is read without its line end, and one too short is refused naming how "
          "to make one") {
  temp_dir tmp;
  auto good = (tmp.path / "good").string();
  std::ofstream(good) << "s3cret-s3cret-s3cret\r\n";
  auto r = read_secret_file(good, "secret file");
  REQUIRE(r);
  CHECK(*r == "s3cret-s3cret-s3cret");
  auto shorter = (tmp.path / "short").string();
  std::ofstream(shorter) << "abc\n";
  r = read_secret_file(shorter, "secret file");
  REQUIRE_FALSE(r);
  CHECK(r.err().message.find("openssl rand -hex 32 > " + shorter) != std::string::npos);
}

TEST_CASE("a secret file that cannot be read says why: missing, a directory, or far too large") {
  temp_dir tmp;
  auto missing = (tmp.path / "missing").string();
  auto r = read_secret_file(missing, "token file");
  REQUIRE_FALSE(r);
  CHECK(r.err().message == "token file " + missing + " cannot be read: No such file or directory");
  r = read_secret_file(tmp.path.string(), "token file");
  REQUIRE_FALSE(r);
  CHECK(r.err().message == "token file " + tmp.path.string() + " cannot be read: Is a directory");
  auto big = (tmp.path / "big").string();
  std::ofstream(big) << std::string(100 * 1024, 'x');
  r = read_secret_file(big, "token file");
  REQUIRE_FALSE(r);
  CHECK(r.err().message == "token file " + big + " holds more than 65536 bytes: not a secret file");
}
