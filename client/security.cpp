#include "client/security.hpp"

#include <cstdlib>

#include "client/secret_file.hpp"

namespace fusee::client {

proto::result<security> resolve(security_flags f) {
  auto from_env = [](std::string& v, const char* name) {
    if (!v.empty()) return;
    if (const char* e = std::getenv(name); e != nullptr) v = e;
  };
  from_env(f.token_file, "FUSEE_TOKEN_FILE");
  from_env(f.ca_file, "FUSEE_TLS_CA_FILE");
  from_env(f.cert_file, "FUSEE_TLS_CERT_FILE");
  from_env(f.key_file, "FUSEE_TLS_KEY_FILE");
  from_env(f.server_name, "FUSEE_TLS_SERVER_NAME");
  security s;
  s.tls = tls::client_files{f.ca_file, f.cert_file, f.key_file, f.server_name};
  if (f.cert_file.empty() != f.key_file.empty())
    return proto::error{proto::err_code::io, "--cert-file and --key-file go together"};
  if (!f.token_file.empty()) {
    auto t = read_secret_file(f.token_file, "token file");
    if (!t) return t.err();
    s.token = std::move(*t);
    s.token_file = f.token_file;
    if (auto exposed = exposed_secret_file(f.token_file, "token file"))
      s.warnings.push_back(std::move(*exposed));
  }
  if (!f.key_file.empty())
    if (auto exposed = exposed_secret_file(f.key_file, "TLS key file"))
      s.warnings.push_back(std::move(*exposed));
  return s;
}

}  // namespace fusee::client
