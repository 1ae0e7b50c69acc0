#include "protocol/json_text.hpp"

namespace fusee::proto {

void append_json_string(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  out += '"';
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      out += "\\u00";
      out += hex[u >> 4];
      out += hex[u & 0xF];
    } else {
      out += c;
    }
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
