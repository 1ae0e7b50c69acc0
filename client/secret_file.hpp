// A secret kept in a file (an endpoint's `secret_file`, `fusee handler --secret-file`, a token
// file): the file's bytes less trailing CR/LF. Never logged; errors name the file only.
#pragma once

#include <string>

#include "protocol/result.hpp"

namespace fusee::client {

/// The secret in `path`; an error says the file (called `what`, e.g. "token file") cannot be
/// read or is empty.
proto::result<std::string> read_secret_file(const std::string& path,
                                            const std::string& what = "secret file");

}  // namespace fusee::client
