#include "protocol/frame.hpp"

#include <cstring>
#include <string_view>

#include "protocol/crc32c.hpp"

namespace fusee::proto {

namespace {

constexpr uint8_t magic[4] = {'F', 'S', 'E', '1'};

/// What `p` (`n` bytes that are not a frame) is, when it looks like HTTP: the commonest wrong
/// port is an HTTP listener's, or an HTTP client at the workers' port.
std::string bad_magic_message(const uint8_t* p, size_t n) {
  std::string_view s{reinterpret_cast<const char*>(p), n};
  std::string base = "bad magic: a frame must start with \"FSE1\"";
  if (s.substr(0, 5) == "HTTP/")
    return base + "; the peer answered in HTTP: an HTTP listener, not a Fusee server's port for "
                  "workers and clients (`listen`, listen= in its ready file)";
  for (std::string_view method :
       {"GET ", "POST ", "PUT ", "HEAD ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT "})
    if (s.substr(0, method.size()) == method)
      return base + "; this is an HTTP request (this port speaks Fusee's protocol: the HTTP API "
                    "has its own listener)";
  return base;
}

uint32_t load_le32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

}  // namespace

uint32_t frame_crc(uint8_t kind, byte_view body) {
  return crc32c(body.data(), body.size(), crc32c(&kind, 1));
}

void append_frame(bytes& out, uint8_t kind, byte_view body) {
  out.reserve(out.size() + frame_header_size + body.size());
  writer w{out};
  w.raw(byte_view{magic, sizeof(magic)});
  w.u8(kind);
  w.u32(static_cast<uint32_t>(body.size()));
  w.u32(frame_crc(kind, body));
  w.raw(body);
}

bytes encode_frame(uint8_t kind, byte_view body) {
  bytes out;
  append_frame(out, kind, body);
  return out;
}

err_code to_err_code(frame_error e) {
  return e == frame_error::too_large ? err_code::too_large : err_code::bad_frame;
}

void frame_decoder::feed(const uint8_t* data, size_t size) {
  if (failure_ || size == 0) return;
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ > 64 * 1024 && pos_ * 2 > buf_.size()) {
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<ptrdiff_t>(pos_));
    pos_ = 0;
  }
  buf_.insert(buf_.end(), data, data + size);
}

error frame_decoder::fail(frame_error e, std::string message) {
  failure_ = e;
  failure_message_ = std::move(message);
  return error{to_err_code(e), failure_message_};
}

result<std::optional<frame>> frame_decoder::next() {
  if (failure_) return error{to_err_code(*failure_), failure_message_};
  size_t avail = buf_.size() - pos_;
  if (avail == 0) return std::optional<frame>{};
  const uint8_t* p = buf_.data() + pos_;
  // Check the magic as soon as its bytes arrive, so garbage fails fast.
  size_t m = avail < 4 ? avail : 4;
  if (std::memcmp(p, magic, m) != 0)
    return fail(frame_error::bad_magic, bad_magic_message(p, avail));
  if (avail < frame_header_size) return std::optional<frame>{};
  uint8_t kind = p[4];
  uint32_t len = load_le32(p + 5);
  uint32_t crc = load_le32(p + 9);
  if (len > max_body_ || len > max_body_size)
    return fail(frame_error::too_large, "frame body of " + std::to_string(len) +
                                            " bytes exceeds the limit of " +
                                            std::to_string(std::min(max_body_, max_body_size)));
  // No reserve() for the length a header claims: a peer that sends headers only must not make
  // this side allocate their bodies.
  if (avail < frame_header_size + len) return std::optional<frame>{};
  byte_view body{p + frame_header_size, len};
  if (frame_crc(kind, body) != crc)
    return fail(frame_error::bad_checksum, "bad checksum on a frame of kind " +
                                               std::to_string(kind) + " and " +
                                               std::to_string(len) + " bytes");
  frame f{kind, bytes(body.begin(), body.end())};
  pos_ += frame_header_size + len;
  return std::optional<frame>{std::move(f)};
}

std::optional<uint64_t> peek_id(byte_view body) {
  if (body.size() < 8) return std::nullopt;
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t{body[i]} << (8 * i);
  return v;
}

}  // namespace fusee::proto
