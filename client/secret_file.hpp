// A secret kept in a file (an endpoint's `secret_file`, `fusee handler --secret-file`, a token
// file): the file's bytes less trailing CR/LF. Never logged; errors name the file only.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "protocol/result.hpp"

namespace fusee::client {

/// The fewest bytes a secret may have: a short one (a word, a PIN) could be guessed offline from
/// one signed request or proof.
constexpr size_t min_secret_size = 16;

/// The secret in `path`; an error says the file (called `what`, e.g. "token file") cannot be
/// read, is empty or holds fewer than min_secret_size bytes.
proto::result<std::string> read_secret_file(const std::string& path,
                                            const std::string& what = "secret file");

/// A warning when users other than the file's owner and group may read or write `path` (mode
/// bits 0006): any account on the machine could sign requests or prove the token. Nothing when
/// the mode is tighter or the file cannot be examined (reading it says why).
std::optional<std::string> exposed_secret_file(const std::string& path,
                                               const std::string& what = "secret file");

}  // namespace fusee::client
