#include "app/ready_file.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace fusee::app {

std::optional<std::string> write_ready_file(const std::string& path, const std::string& text) {
  auto tmp = path + ".tmp";
  auto fail = [&](const std::string& what, const std::string& file) {
    std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return "cannot " + what + " the ready file " + file + ": " + why;
  };
  {
    errno = 0;
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) return fail("write", tmp);
    out << text;
    out.flush();
    if (!out) return fail("write", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename " + tmp + " to", path);
  return std::nullopt;
}

void remove_ready_file(const std::string& path) {
  if (!path.empty()) std::remove(path.c_str());
}

}  // namespace fusee::app
