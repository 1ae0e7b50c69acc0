// Invocation signatures (PROTOCOL.md §8): header `fusee-signature: t=<unix
// ms>,v1=<hex>[,v1=<hex>...]` with v1 = lowercase hex HMAC-SHA256(secret, "<t>." + body).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "protocol/wire.hpp"

namespace fusee::proto {

inline constexpr std::string_view signature_header_name = "fusee-signature";
/// How far a signature's `t` may be from the verifier's clock, in either direction, by default.
inline constexpr uint64_t default_signature_tolerance_ms = 5 * 60 * 1000;

using sha256_digest = std::array<uint8_t, 32>;

sha256_digest hmac_sha256(byte_view key, byte_view data);
/// HMAC-SHA256 over the concatenation of `parts`.
sha256_digest hmac_sha256(byte_view key, std::initializer_list<byte_view> parts);

/// The header value for `body` signed at `t_ms` with each of `secrets` (one v1= entry each, in
/// order: during rotation, sign with the new and the old secret).
std::string sign(std::span<const std::string> secrets, uint64_t t_ms, std::string_view body);
std::string sign(std::string_view secret, uint64_t t_ms, std::string_view body);

enum class signature_error : uint8_t {
  malformed,  ///< not `t=<digits>` plus at least one `v1=<64 lowercase hex>`
  too_old,    ///< t is more than the tolerance before now
  too_new,    ///< t is more than the tolerance after now
  mismatch,   ///< no v1 entry matches any secret
};

struct signature_failure {
  signature_error reason;
  std::string message;
};

/// What can be checked of a header without its body: well formed (t= and at least one v1=) and
/// t within the tolerance of `now_ms`. verify() checks this first; a receiver may call it alone
/// to refuse a bad header before it reads the body.
std::optional<signature_failure>
check_header(std::string_view header, uint64_t now_ms,
             uint64_t tolerance_ms = default_signature_tolerance_ms);

/// Checks a header against `body` for any of `secrets` (several during rotation). Digests are
/// compared in constant time. Returns nothing when the signature is good. Entries with other
/// keys than t and v1 are ignored, so a later scheme can be added beside v1.
std::optional<signature_failure> verify(std::string_view header, std::string_view body,
                                        std::span<const std::string> secrets, uint64_t now_ms,
                                        uint64_t tolerance_ms = default_signature_tolerance_ms);

}  // namespace fusee::proto
