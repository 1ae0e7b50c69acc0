// How a worker or client connection checks the server and proves itself (docs/operations.md,
// "Securing a node"): TLS 1.3 when CA or certificate files are given, then a token (AUTH).
#pragma once

#include <string>
#include <vector>

#include "protocol/auth.hpp"
#include "protocol/result.hpp"
#include "tls/context.hpp"

namespace fusee::client {

struct security {
  tls::client_files tls;  ///< none enabled(): plain TCP
  std::string token;      ///< proven with AUTH after TLS; empty: none. Never logged.
  /// The file `token` was read from, if any: every connection reads it again, so a token file
  /// replaced in place (a rotation) is proven from the next connection on, without a restart.
  /// Unreadable then (mid-replace), the token read before is proven.
  std::string token_file;
  /// What the command should say before it connects: a token or TLS key file other users of
  /// the machine may read or write (it still works).
  std::vector<std::string> warnings;
  ~security() { proto::wipe(token); }
};

/// What a command line gave: file names, each defaulting to an environment variable
/// (FUSEE_TOKEN_FILE, FUSEE_TLS_CA_FILE, FUSEE_TLS_CERT_FILE, FUSEE_TLS_KEY_FILE,
/// FUSEE_TLS_SERVER_NAME).
struct security_flags {
  std::string token_file, ca_file, cert_file, key_file, server_name;
};

/// Fills the flags' gaps from the environment and reads the token file; an error names the file.
/// A token or key file others may read is a warning, not an error (`warnings`).
proto::result<security> resolve(security_flags flags);

}  // namespace fusee::client
