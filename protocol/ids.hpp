// Strong types for the identities that must not mix: shard, epoch, LSN, invocation id.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace fusee::proto {

/// A number with a meaning: construction is explicit and different tags do not convert.
template <class Tag, class Rep>
class strong {
public:
  using rep = Rep;
  constexpr strong() = default;
  constexpr explicit strong(Rep v) : v_(v) {}
  constexpr Rep value() const { return v_; }
  constexpr auto operator<=>(const strong&) const = default;

private:
  Rep v_{};
};

using shard_id = strong<struct shard_tag, uint32_t>;
/// Lease epoch of one shard; every grant is strictly greater than all before it.
using epoch_t = strong<struct epoch_tag, uint64_t>;
/// Log sequence number within one shard; starts at 1, no holes.
using lsn_t = strong<struct lsn_tag, uint64_t>;
/// Names one HTTP invocation; never 0.
using invocation_id = strong<struct invocation_tag, uint64_t>;

/// The shard field of requests that concern no single shard.
inline constexpr shard_id no_shard{0xFFFFFFFFu};

/// 16 lowercase hex digits, as in the invocation POST and HELLO.
std::string format_invocation_id(invocation_id id);

/// Parses exactly 16 lowercase hex digits of a nonzero value.
std::optional<invocation_id> parse_invocation_id(std::string_view text);

/// A fresh random nonzero id from OpenSSL's RAND_bytes. Aborts if the RNG fails (no safe fallback).
invocation_id random_invocation_id();

}  // namespace fusee::proto

template <class Tag, class Rep>
struct std::hash<fusee::proto::strong<Tag, Rep>> {
  size_t operator()(const fusee::proto::strong<Tag, Rep>& x) const noexcept {
    return std::hash<Rep>{}(x.value());
  }
};
