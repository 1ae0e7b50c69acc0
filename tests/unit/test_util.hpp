// Helpers shared by the unit tests.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string_view>

#include "protocol/wire.hpp"

namespace fusee::test {

/// "46 53 45 31" -> bytes; spaces and newlines are ignored.
inline proto::bytes from_hex(std::string_view hex) {
  proto::bytes out;
  int hi = -1;
  for (char c : hex) {
    int v;
    if (c >= '0' && c <= '9')
      v = c - '0';
    else if (c >= 'a' && c <= 'f')
      v = c - 'a' + 10;
    else if (c == ' ' || c == '\n')
      continue;
    else
      throw std::invalid_argument("bad hex digit");
    if (hi < 0) {
      hi = v;
    } else {
      out.push_back(static_cast<uint8_t>(hi << 4 | v));
      hi = -1;
    }
  }
  if (hi >= 0) throw std::invalid_argument("odd number of hex digits");
  return out;
}

inline proto::bytes to_bytes(std::string_view s) {
  return proto::bytes(s.begin(), s.end());
}

/// A fresh directory under the system's temp dir, removed with everything in it.
struct temp_dir {
  std::filesystem::path path;
  temp_dir() {
    std::random_device rd;
    path = std::filesystem::temp_directory_path() / ("fusee-unit-" + std::to_string(rd()));
    std::filesystem::create_directories(path);
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

/// A seeded generator, so a failing run can be repeated.
inline std::mt19937_64& rng() {
  static std::mt19937_64 gen{0x5eed'f05e'e001ull};
  return gen;
}

/// This run's kernel refuses epoll_pwait2 (ENOSYS): doctest_main.cpp installs a seccomp filter
/// when FUSEE_TEST_DENY_EPOLL_PWAIT2 is set, as on a kernel before 5.11.
inline bool epoll_pwait2_denied() {
  return std::getenv("FUSEE_TEST_DENY_EPOLL_PWAIT2") != nullptr;
}

}  // namespace fusee::test
