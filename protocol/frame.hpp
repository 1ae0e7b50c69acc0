// Frames (PROTOCOL.md §2): "FSE1" kind:u8 len:u32le crc:u32le body[len], crc = CRC32C(kind ++
// body).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "protocol/result.hpp"
#include "protocol/wire.hpp"

namespace fusee::proto {

inline constexpr size_t frame_header_size = 13;
/// The largest body a frame may carry: 96 MiB.
inline constexpr uint32_t max_body_size = 96u << 20;
/// The largest record: small enough that any record can be appended and recovered in one frame.
inline constexpr uint32_t max_record_size = max_body_size - 64;
/// How many strings one frame's lists may hold in all: one per 16 bytes of `body_size`, and at
/// least 4,096 in any frame. An empty `str` is a byte on the wire and a 32-byte std::string in
/// memory (twice that while its list grows): without this bound a 96 MiB HELLO of empty types
/// would decode into gigabytes.
inline constexpr uint64_t max_list_strings(uint64_t body_size) {
  return body_size / 16 > 4096 ? body_size / 16 : 4096;
}
/// How many records (`bytes`) one frame's lists may hold in all: one per 4 bytes of `body_size`,
/// and at least 4,096 in any frame. An empty record is a byte on the wire and a 16-byte view (24
/// as a copy) in memory; records of 3 bytes or more (4 on the wire) never meet this bound.
inline constexpr uint64_t max_list_records(uint64_t body_size) {
  return body_size / 4 > 4096 ? body_size / 4 : 4096;
}
/// Whether a batch of `count` records holding `bytes` in all may take one more of `size` bytes:
/// the first always; then within `max_bytes` of records and max_list_records of the bytes they
/// take on the wire at least (each one's length prefix is a byte or more). The rule of a
/// worker's APPENDs and a server's LOG_PAGEs, so that the other side decodes them.
inline constexpr bool batch_takes(uint64_t count, uint64_t bytes, uint64_t size,
                                  uint64_t max_bytes) {
  return count == 0 ||
         (bytes + size <= max_bytes && count < max_list_records(bytes + size + count + 1));
}

struct frame {
  uint8_t kind = 0;
  bytes body;
};

/// CRC32C over kind ++ body.
uint32_t frame_crc(uint8_t kind, byte_view body);

/// Appends one frame to `out`.
void append_frame(bytes& out, uint8_t kind, byte_view body);
bytes encode_frame(uint8_t kind, byte_view body);
/// The kind of an encoded frame (the byte after the magic); 0 (no kind) if it has no header.
inline uint8_t kind_of_frame(byte_view frame) {
  return frame.size() >= frame_header_size ? frame[4] : 0;
}

/// Why the frame decoder stopped. Each maps to the ERR code PROTOCOL.md §2 names.
enum class frame_error : uint8_t {
  bad_magic,     ///< ERR BAD_FRAME
  bad_checksum,  ///< ERR BAD_FRAME
  too_large,     ///< ERR TOO_LARGE (the body is not read)
};

err_code to_err_code(frame_error e);

/// Incremental decoder: feed bytes in any chunking, take whole frames out.
/// After a failure it stays failed (the connection must close); it never reads past what was fed.
class frame_decoder {
public:
  /// Bodies over `max_body` bytes (at most max_body_size) fail with TOO_LARGE.
  explicit frame_decoder(uint32_t max_body = max_body_size) : max_body_(max_body) {}

  /// The limit for frames whose header is read from now on.
  void set_max_body(uint32_t max_body) { max_body_ = max_body; }

  void feed(const uint8_t* data, size_t size);
  void feed(byte_view data) { feed(data.data(), data.size()); }

  /// The next whole frame, std::nullopt if more bytes are needed, or the (sticky) error.
  result<std::optional<frame>> next();

  /// Set once next() has failed.
  std::optional<frame_error> failure() const { return failure_; }
  /// Bytes fed and not yet returned as frames.
  size_t buffered() const { return buf_.size() - pos_; }

private:
  error fail(frame_error e, std::string message);

  uint32_t max_body_;
  bytes buf_;
  size_t pos_ = 0;
  std::optional<frame_error> failure_;
  std::string failure_message_;
};

/// The `id` of a request or answer body (its first 8 bytes), if it has one.
std::optional<uint64_t> peek_id(byte_view body);

}  // namespace fusee::proto
