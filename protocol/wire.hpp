// Wire primitives (PROTOCOL.md §1): little-endian integers, LEB128 varints, bytes, str, list.
// The reader never reads past its input; the first failure sticks and names the field.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/errors.hpp"

namespace fusee::proto {

using bytes = std::vector<uint8_t>;
using byte_view = std::span<const uint8_t>;

inline byte_view as_bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

/// Appends encodings to a byte vector it does not own.
class writer {
public:
  explicit writer(bytes& out) : out_(out) {}

  void u8(uint8_t v) { out_.push_back(v); }
  void u16(uint16_t v) { put_le(v, 2); }
  void u32(uint32_t v) { put_le(v, 4); }
  void u64(uint64_t v) { put_le(v, 8); }
  void varint(uint64_t v);
  /// `varint length` then the bytes.
  void blob(byte_view v);
  void str(std::string_view v) { blob(as_bytes(v)); }
  /// The `u32 count` that starts a list.
  void count(size_t n) { u32(static_cast<uint32_t>(n)); }
  void raw(byte_view v) { out_.insert(out_.end(), v.begin(), v.end()); }

private:
  void put_le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      out_.push_back(static_cast<uint8_t>(v >> (8 * i)));
  }
  bytes& out_;
};

/// Reads encodings from a view it does not own. Every method returns false once anything failed;
/// error() then says what and where.
class reader {
public:
  explicit reader(byte_view in) : in_(in) {}

  bool u8(uint8_t& v, const char* field);
  bool u16(uint16_t& v, const char* field);
  bool u32(uint32_t& v, const char* field);
  bool u64(uint64_t& v, const char* field);
  /// Unsigned LEB128, at most 10 bytes; overlong (non-minimal) and overflowing input fail.
  bool varint(uint64_t& v, const char* field);
  /// `varint length` then that many bytes, viewed in place. A length over the blob limit fails
  /// with TOO_LARGE, before the bytes left are looked at.
  bool blob_view(byte_view& v, const char* field);
  bool blob(bytes& v, const char* field);
  /// A blob holding valid UTF-8.
  bool str(std::string& v, const char* field);
  /// Steps over n bytes.
  bool skip(size_t n, const char* field);
  /// Everything not yet read.
  bool rest(bytes& v);
  /// A list's `u32 count`; fails if fewer than count * min_item_size bytes remain, so a hostile
  /// count cannot make the caller allocate more than the input's size.
  bool count(uint32_t& n, size_t min_item_size, const char* field);

  /// Records a failure (the first one wins) and returns false.
  bool fail(err_code code, std::string message);

  bool ok() const { return !error_; }
  size_t offset() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }
  const std::optional<proto::error>& error() const { return error_; }
  /// Prefixes later error messages ("APPEND").
  void set_context(std::string_view ctx) { ctx_ = ctx; }
  /// The longest blob or str this reader accepts (PROTOCOL.md §10: a record's limit on the wire).
  void set_blob_limit(uint64_t limit) { blob_limit_ = limit; }

private:
  bool need(size_t n, const char* what, const char* field);
  uint64_t get_le(int n);

  byte_view in_;
  size_t pos_ = 0;
  std::string_view ctx_;
  uint64_t blob_limit_ = UINT64_MAX;
  std::optional<proto::error> error_;
};

/// True if `data` is well-formed UTF-8.
bool valid_utf8(byte_view data);

}  // namespace fusee::proto
