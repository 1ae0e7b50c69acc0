// libFuzzer target over the on-disk parsers (actors/wal/format): segment and batch headers, a
// batch's sections and records, checkpoint files, fusee.meta and segment file names. Beyond "no
// crash": whatever decodes re-encodes to something that decodes to the same.
#include <cstdlib>
#include <string_view>

#include "actors/wal/format.hpp"

using namespace fusee;
using namespace fusee::server::wal;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  proto::byte_view in{data + 1, size - 1};
  switch (data[0] % 5) {
  case 0:
    (void)decode_segment_header(in);
    break;
  case 1: {  // a batch: header, checksum, sections, the records of each records section
    if (in.size() < batch_header_size) break;
    auto h = decode_batch_header(in);
    if (!h) break;
    auto body = in.subspan(batch_header_size);
    if (body.size() > h->len) body = body.first(h->len);
    (void)batch_checksum_ok(*h, body);
    auto sections = decode_sections(body);
    if (!sections) break;
    for (auto& s : *sections)
      if (auto* r = std::get_if<records_section>(&s))
        (void)decode_records(r->region, static_cast<uint32_t>(r->records.size()));
    break;
  }
  case 2: {
    auto c = decode_checkpoint(in);
    if (c) {
      auto again = decode_checkpoint(encode(*c));
      if (!again) std::abort();
    }
    break;
  }
  case 3: {
    std::string_view text{reinterpret_cast<const char*>(in.data()), in.size()};
    auto m = decode_meta(text);
    if (m && !decode_meta(encode(*m))) std::abort();
    break;
  }
  case 4: {
    std::string_view name{reinterpret_cast<const char*>(in.data()), in.size()};
    if (auto seq = parse_segment_name(name); seq && segment_name(*seq) != name) std::abort();
    break;
  }
  }
  return 0;
}
