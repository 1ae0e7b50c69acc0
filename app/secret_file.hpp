// An HMAC secret kept in a file (an endpoint's `secret_file`, `fusee handler --secret-file`): the
// file's bytes less trailing CR/LF. Never logged; errors name the file only.
#pragma once

#include <string>

#include "protocol/result.hpp"

namespace fusee::app {

/// The secret in `path`; an error says the file cannot be read or is empty.
proto::result<std::string> read_secret_file(const std::string& path);

}  // namespace fusee::app
