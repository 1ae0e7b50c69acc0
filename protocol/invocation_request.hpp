// The invocation POST body (PROTOCOL.md §8):
// {"version":1,"invocation":"00f3a1c2b4d5e6f7","shards":[3,9],"budget_ms":60000,
//  "reasons":["call","timer"],"server":"127.0.0.1:7400"}
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/ids.hpp"
#include "protocol/result.hpp"

namespace fusee::proto {

/// Why shards are due; a set of these travels as `reasons`.
enum reason : uint8_t {
  reason_call = 1,
  reason_message = 2,
  reason_timer = 4,
  reason_recovery = 8,
  reason_handback = 16,
  reason_code = 32,
};
inline constexpr uint8_t all_reasons = 63;

/// "call", "message", ...; empty for anything that is not exactly one reason bit.
std::string_view reason_name(uint8_t bit);
std::optional<reason> parse_reason(std::string_view name);
/// A set of reasons as names joined by commas, in bit order ("call,timer"); "" for none.
std::string reasons_text(uint8_t reasons);

struct invocation_request {
  uint32_t version = 1;
  invocation_id invocation{};
  std::vector<shard_id> shards;
  uint32_t budget_ms = 0;
  uint8_t reasons = 0;  ///< set of `reason` bits
  std::string server;   ///< host:port to connect back to
  bool operator==(const invocation_request&) const = default;
};

/// The longest body an endpoint need take: an invocation's most shards (max_invocation_shards,
/// 960,000 at 96 MiB frames) as numbers of up to 7 digits, with room to spare.
inline constexpr size_t max_invocation_body = size_t{32} << 20;

/// The body, compact, keys in the order above, reasons in bit order.
std::string to_json(const invocation_request& r);

/// Strict parse: an object with every key above of the right type and range, version 1, a
/// nonzero 16-hex-digit invocation, at least one shard and no repeats, known reasons, a non-empty
/// server, nothing after the object. Unknown keys are ignored (a later version may add some);
/// a repeated key is an error.
result<invocation_request> parse_invocation_request(std::string_view json);

}  // namespace fusee::proto
