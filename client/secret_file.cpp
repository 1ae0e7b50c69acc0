#include "client/secret_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <system_error>

namespace fusee::client {

namespace {
constexpr size_t max_secret_file_bytes = 64 * 1024;
}

proto::result<std::string> read_secret_file(const std::string& path, const std::string& what) {
  // (A missing file and one this user may not read call for different fixes: say which.)
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return proto::error{proto::err_code::io, what + " " + path + " cannot be read: " +
                                                 std::generic_category().message(errno)};
  std::string secret;
  char buf[4096];
  for (;;) {
    auto n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {  // a directory, say
      auto why = std::generic_category().message(errno);
      ::close(fd);
      return proto::error{proto::err_code::io, what + " " + path + " cannot be read: " + why};
    }
    if (n == 0) break;
    secret.append(buf, static_cast<size_t>(n));
    if (secret.size() > max_secret_file_bytes) {  // (/dev/zero, a log file named by mistake)
      ::close(fd);
      return proto::error{proto::err_code::io, what + " " + path + " holds more than " +
                                                   std::to_string(max_secret_file_bytes) +
                                                   " bytes: not a secret file"};
    }
  }
  ::close(fd);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r'))
    secret.pop_back();
  if (secret.empty()) return proto::error{proto::err_code::io, what + " " + path + " is empty"};
  if (secret.size() < min_secret_size)
    return proto::error{proto::err_code::io,
                        what + " " + path + " holds fewer than " + std::to_string(min_secret_size) +
                            " bytes; make one with `openssl rand -hex 32 > " + path + "`"};
  return secret;
}

std::optional<std::string> exposed_secret_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & (S_IROTH | S_IWOTH)) == 0)
    return std::nullopt;
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return what + " " + path + " may be " + ((st.st_mode & S_IROTH) ? "read" : "written") +
         " by every user of this machine (mode " + mode + "): `chmod 600 " + path +
         "` (or 640 for a group that needs it)";
}

}  // namespace fusee::client
