#include "client/secret_file.hpp"

#include <fstream>
#include <iterator>

namespace fusee::client {

proto::result<std::string> read_secret_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return proto::error{proto::err_code::io, what + " " + path + " cannot be read"};
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

}  // namespace fusee::client
