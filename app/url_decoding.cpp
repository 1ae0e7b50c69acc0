#include "app/url_decoding.hpp"

#include <cstring>

namespace fusee::app {

namespace {

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

/// Decodes in[0, n) into out (which may be in: it never gets ahead); returns out's length.
size_t decode(const char* in, size_t n, char* out) {
  size_t o = 0;
  for (size_t i = 0; i < n; ++i) {
    int hi = -1, lo = -1;
    if (in[i] == '%' && i + 2 < n && (hi = hex(in[i + 1])) >= 0 && (lo = hex(in[i + 2])) >= 0) {
      char c = static_cast<char>(hi * 16 + lo);
      out[o++] = c == '\0' ? '\x7f' : c;
      i += 2;
    } else {
      out[o++] = in[i];
    }
  }
  return o;
}

}  // namespace

size_t percent_decode_in_place(char* s) {
  size_t n = decode(s, std::strlen(s), s);
  s[n] = '\0';
  return n;
}

std::string percent_decoded(std::string_view s) {
  std::string out(s.size(), '\0');
  out.resize(decode(s.data(), s.size(), out.data()));
  return out;
}

std::vector<std::string> path_segments(std::string_view raw_path) {
  std::vector<std::string> out;
  size_t i = raw_path.rfind('/', 0) == 0 ? 1 : 0;
  while (i <= raw_path.size()) {
    size_t j = raw_path.find('/', i);
    if (j == std::string_view::npos) j = raw_path.size();
    out.push_back(percent_decoded(raw_path.substr(i, j - i)));
    i = j + 1;
  }
  return out;
}

}  // namespace fusee::app
