#include "protocol/wire.hpp"

#include <simdjson.h>

namespace fusee::proto {

void writer::varint(uint64_t v) {
  while (v >= 0x80) {
    out_.push_back(static_cast<uint8_t>(v) | 0x80);
    v >>= 7;
  }
  out_.push_back(static_cast<uint8_t>(v));
}

void writer::blob(byte_view v) {
  varint(v.size());
  raw(v);
}

bool reader::fail(err_code code, std::string message) {
  if (!error_) {
    std::string text;
    if (!ctx_.empty()) {
      text.append(ctx_);
      text += ": ";
    }
    text += message;
    error_ = proto::error{code, std::move(text)};
  }
  return false;
}

bool reader::need(size_t n, const char* what, const char* field) {
  if (error_) return false;
  if (remaining() >= n) return true;
  return fail(err_code::bad_body, std::string{field} + ": body ends at byte " +
                                      std::to_string(in_.size()) + ", " + what + " needs " +
                                      std::to_string(n) + " (" + std::to_string(remaining()) +
                                      " left)");
}

uint64_t reader::get_le(int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= static_cast<uint64_t>(in_[pos_ + i]) << (8 * i);
  pos_ += n;
  return v;
}

bool reader::u8(uint8_t& v, const char* field) {
  if (!need(1, "u8", field)) return false;
  v = static_cast<uint8_t>(get_le(1));
  return true;
}

bool reader::u16(uint16_t& v, const char* field) {
  if (!need(2, "u16", field)) return false;
  v = static_cast<uint16_t>(get_le(2));
  return true;
}

bool reader::u32(uint32_t& v, const char* field) {
  if (!need(4, "u32", field)) return false;
  v = static_cast<uint32_t>(get_le(4));
  return true;
}

bool reader::u64(uint64_t& v, const char* field) {
  if (!need(8, "u64", field)) return false;
  v = get_le(8);
  return true;
}

bool reader::varint(uint64_t& v, const char* field) {
  if (error_) return false;
  uint64_t out = 0;
  for (int i = 0; i < 10; ++i) {
    if (pos_ >= in_.size())
      return fail(err_code::bad_body, std::string{field} + ": varint runs past the body");
    uint8_t b = in_[pos_++];
    if (i == 9 && b > 1)
      return fail(err_code::bad_body, std::string{field} + ": varint exceeds 2^64-1");
    out |= static_cast<uint64_t>(b & 0x7F) << (7 * i);
    if ((b & 0x80) == 0) {
      if (b == 0 && i > 0)
        return fail(err_code::bad_body, std::string{field} + ": overlong varint");
      v = out;
      return true;
    }
  }
  return fail(err_code::bad_body, std::string{field} + ": varint longer than 10 bytes");
}

bool reader::blob_view(byte_view& v, const char* field) {
  uint64_t len = 0;
  if (!varint(len, field)) return false;
  if (len > blob_limit_)
    return fail(err_code::too_large, std::string{field} + ": length " + std::to_string(len) +
                                         " exceeds the limit of " + std::to_string(blob_limit_));
  if (len > remaining())
    return fail(err_code::bad_body, std::string{field} + ": length " + std::to_string(len) +
                                        " but " + std::to_string(remaining()) + " bytes left");
  v = in_.subspan(pos_, static_cast<size_t>(len));
  pos_ += static_cast<size_t>(len);
  return true;
}

bool reader::blob(bytes& v, const char* field) {
  byte_view view;
  if (!blob_view(view, field)) return false;
  v.assign(view.begin(), view.end());
  return true;
}

bool reader::str(std::string& v, const char* field) {
  byte_view view;
  if (!blob_view(view, field)) return false;
  if (!valid_utf8(view)) return fail(err_code::bad_body, std::string{field} + ": not valid UTF-8");
  v.assign(reinterpret_cast<const char*>(view.data()), view.size());
  return true;
}

bool reader::skip(size_t n, const char* field) {
  if (!need(n, "the skipped bytes", field)) return false;
  pos_ += n;
  return true;
}

bool reader::rest(bytes& v) {
  if (error_) return false;
  v.assign(in_.begin() + static_cast<ptrdiff_t>(pos_), in_.end());
  pos_ = in_.size();
  return true;
}

bool reader::count(uint32_t& n, size_t min_item_size, const char* field) {
  if (!u32(n, field)) return false;
  if (min_item_size > 0 && n > remaining() / min_item_size)
    return fail(err_code::bad_body, std::string{field} + ": list of " + std::to_string(n) +
                                        " items cannot fit in the " + std::to_string(remaining()) +
                                        " bytes left");
  return true;
}

bool valid_utf8(byte_view data) {
  return simdjson::validate_utf8(reinterpret_cast<const char*>(data.data()), data.size());
}

}  // namespace fusee::proto
