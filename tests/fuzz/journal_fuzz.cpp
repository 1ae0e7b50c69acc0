// libFuzzer target over the workflow runtime's on-disk parsers: journal records and checkpoints.
// Beyond "no crash": what decodes re-encodes to exactly the bytes it came from, and a refusal
// always says why.
#include <cstdlib>

#include "worker/journal.hpp"

using namespace fusee;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  proto::byte_view in{data + 1, size - 1};
  if (data[0] & 1) {
    auto r = worker::decode_record(in);
    if (!r) {
      if (r.err().message.empty()) std::abort();
      return 0;
    }
    auto again = worker::encode(*r);
    if (again.size() != in.size() || !std::equal(again.begin(), again.end(), in.begin()))
      std::abort();
  } else {
    auto c = worker::decode_checkpoint(in);
    if (!c) {
      if (c.err().message.empty()) std::abort();
      return 0;
    }
    auto again = worker::encode_checkpoint(*c);
    if (again.size() != in.size() || !std::equal(again.begin(), again.end(), in.begin()))
      std::abort();
  }
  return 0;
}
