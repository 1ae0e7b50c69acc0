// Wire error codes (PROTOCOL.md §4) and the error value every protocol function returns.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fusee::proto {

/// The `code` of an ERR frame. Numbers are stable: they are on the wire.
enum class err_code : uint16_t {
  bad_frame = 1,           ///< bad magic or checksum
  unknown_kind = 2,        ///< a kind that is not a request
  bad_body = 3,            ///< a body that does not decode, or breaks a rule of its kind
  stale_epoch = 4,         ///< the epoch was granted for the shard but is no longer live
  not_holder = 5,          ///< the connection does not hold the shard
  lsn_gap = 6,             ///< APPEND's first_lsn is not one past the shard's last LSN
  unknown_invocation = 7,  ///< HELLO names an invocation that is unknown or finished
  invocation_taken = 8,    ///< another connection already answers the invocation
  version = 9,             ///< unsupported protocol version
  too_large = 10,          ///< frame length over the limit
  io = 11,                 ///< the server could not write or read its disk
  shutting_down = 12,      ///< the server is stopping
  unauthorized = 13,       ///< not allowed
  bad_offer = 14,          ///< HELLO offers unknown bits
};

/// True for the codes PROTOCOL.md defines.
constexpr bool is_known(uint16_t code) {
  return code >= 1 && code <= 14;
}

/// The upper-case name used in PROTOCOL.md ("BAD_FRAME"), or "UNKNOWN" for other values.
std::string_view name(err_code code);

/// An error with a code a peer can act on and a message a person can read.
struct error {
  err_code code = err_code::bad_body;
  std::string message;

  /// "BAD_BODY: APPEND: 3 bytes left over after the body".
  std::string to_string() const;
};

}  // namespace fusee::proto
