// libFuzzer target over the frame decoder, every body decoder, the invocation JSON parser and the
// signature header parser. Properties checked beyond "no crash": a decoded message is valid and
// re-encodes to exactly the bytes it came from.
#include <cstdlib>
#include <string_view>

#include "protocol/invocation_request.hpp"
#include "protocol/messages.hpp"
#include "protocol/signature.hpp"

using namespace fusee::proto;

namespace {

void check_body(uint8_t kind, byte_view body) {
  auto r = decode(kind, body);
  if (!r) {
    if (r.err().message.empty()) std::abort();
    return;
  }
  if (validate(*r)) std::abort();
  bytes again;
  encode_body(*r, again);
  if (again.size() != body.size() || !std::equal(again.begin(), again.end(), body.begin()))
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte picks a mode and a chunk size, so one corpus explores all parsers.
  uint8_t mode = data[0];
  byte_view rest{data + 1, size - 1};
  switch (mode & 3) {
  case 0:
  case 1: {  // a byte stream through the frame decoder, fed in chunks
    size_t chunk = 1 + (mode >> 2);
    frame_decoder d;
    for (size_t pos = 0; pos < rest.size(); pos += chunk) {
      d.feed(rest.data() + pos, std::min(chunk, rest.size() - pos));
      for (;;) {
        auto f = d.next();
        if (!f || !*f) break;
        check_body((*f)->kind, (*f)->body);
      }
    }
    break;
  }
  case 2:  // a body for the kind in the next byte
    if (!rest.empty()) check_body(rest[0], rest.subspan(1));
    break;
  case 3: {  // JSON and signature headers
    std::string_view text{reinterpret_cast<const char*>(rest.data()), rest.size()};
    if (mode & 4) {
      auto r = parse_invocation_request(text);
      if (r) {
        auto again = parse_invocation_request(to_json(*r));
        if (!again || !(*again == *r)) std::abort();
      }
    } else {
      std::string secret = "k";
      (void)verify(text, "body", std::span<const std::string>{&secret, 1}, 1764489600000);
    }
    break;
  }
  }
  return 0;
}
