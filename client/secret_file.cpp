#include "client/secret_file.hpp"

#include <cstdlib>
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
  return secret;
}

proto::result<std::string> token_from(const std::string& file) {
  if (!file.empty()) return read_secret_file(file, "token file");
  const char* env = std::getenv("FUSEE_TOKEN_FILE");
  if (env == nullptr || *env == 0) return std::string{};
  return read_secret_file(env, "token file (FUSEE_TOKEN_FILE)");
}

}  // namespace fusee::client
