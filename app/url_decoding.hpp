// %XX decoding of a URL's parts, one rule for the HTTP server's paths and query values and for
// the API's path segments.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fusee::app {

/// Decodes each %XX of the 0-terminated `s` in place and returns its new length. An escape that
/// is none (`%zz`, a '%' near the end) stays as it is. %00 becomes 0x7F: a NUL would end the C
/// text libmicrohttpd hands on, so `a%00b` would be read as `a`, another workflow's id; as DEL it
/// is a control character, which no id, name or number takes. '+' is not a space here.
size_t percent_decode_in_place(char* s);

/// `percent_decode_in_place` on a copy.
std::string percent_decoded(std::string_view s);

/// The segments of a path as sent (`/a/b%2Fc` → `a`, `b/c`): split at each '/' first, then each
/// decoded, so an escaped '/' stays inside its segment. A leading '/' starts no segment; empty
/// ones are kept (a trailing or doubled '/' names an empty segment, never another route).
std::vector<std::string> path_segments(std::string_view raw_path);

}  // namespace fusee::app
