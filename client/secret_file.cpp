#include "client/secret_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace fusee::client {

proto::result<std::string> read_secret_file(const std::string& path, const std::string& what) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  if (!in)  // (a missing file and one this user may not read call for different fixes)
    return proto::error{proto::err_code::io,
                        what + " " + path + " cannot be read" +
                            (errno ? std::string{": "} + std::strerror(errno) : std::string{})};
  std::string secret{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
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
