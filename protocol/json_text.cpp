#include "protocol/json_text.hpp"

namespace fusee::proto {

namespace {

/// The length of the valid UTF-8 sequence at the start of `s` (which is not ASCII), or 0 if it is
/// not one: a stray continuation byte, a sequence cut short, an overlong form, a surrogate, or a
/// code point past U+10FFFF.
size_t utf8_length(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](size_t i) { return i < s.size() && (b(i) & 0xC0) == 0x80; };
  unsigned char lead = b(0);
  if (lead >= 0xC2 && lead <= 0xDF) return cont(1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (lead == 0xE0 && b(1) < 0xA0) return 0;   // overlong
    if (lead == 0xED && b(1) >= 0xA0) return 0;  // a surrogate
    return 3;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (lead == 0xF0 && b(1) < 0x90) return 0;   // overlong
    if (lead == 0xF4 && b(1) >= 0x90) return 0;  // past U+10FFFF
    return 4;
  }
  return 0;
}

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 0xF];
    } else if (u >= 0x80) {
      size_t n = utf8_length(s.substr(i));
      if (n == 0) {
        out += "\\ufffd";  // JSON text is UTF-8: a byte that is not becomes U+FFFD
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
      continue;
    } else {
      out += c;
    }
    ++i;
  }
  out += '"';
}

std::string json_quote(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

std::string json_error(std::string_view message) {
  std::string out = "{\"error\":";
  append_json_string(out, message);
  return out + "}";
}

std::string json_error(std::string_view message, std::string_view code) {
  std::string out = json_error(message);
  out.pop_back();
  out += ",\"code\":";
  append_json_string(out, code);
  return out + "}";
}

}  // namespace fusee::proto
