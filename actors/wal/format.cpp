#include "actors/wal/format.hpp"

#include <charconv>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>

#include "protocol/crc32c.hpp"

namespace fusee::server::wal {

namespace {

using proto::err_code;
using proto::reader;
using proto::writer;

// -- field descriptions ---------------------------------------------------------------------
// describe(f, x) lists the fields of x in disk order with the rules they keep; the same
// function drives the encoder and the decoder (and the text forms of fusee.meta), so layout and
// rules cannot drift apart. f(name, field) writes or reads one fixed-width field;
// f.magic(text) is a 4-byte literal; f.check(cond, message) is a rule, tested when reading.

template <class F>
bool describe(F& f, segment_header& x) {
  return f.magic(segment_magic) && f("version", x.version) &&
         f.check(
             x.version == format_version,
             [&] { return "segment format " + std::to_string(x.version) + " is not supported"; }) &&
         f("seq", x.seq);
}

template <class F>
bool describe(F& f, batch_header& x) {
  return f.magic(batch_magic) && f("len", x.len) && f("seq", x.seq) && f("prev_crc", x.prev_crc) &&
         f("crc", x.crc);
}

template <class F>
bool describe(F& f, records_section& x) {
  return f("shard", x.shard) && f("epoch", x.epoch) && f("first_lsn", x.first_lsn) &&
         f.check(x.first_lsn >= 1,
                 [] { return std::string{"records section with first_lsn 0"}; }) &&
         f.records("records", x.records, x.region);
}

template <class F>
bool describe(F& f, grant_section& x) {
  return f("shard", x.shard) && f("epoch", x.epoch);
}

template <class F>
bool describe(F& f, snapshot_entry& x) {
  return f("shard", x.shard) && f("epoch", x.epoch) && f("last_lsn", x.last_lsn);
}

template <class F>
bool describe(F& f, snapshot_section& x) {
  return f.list("shards", x.shards, 20);
}

template <class F>
bool describe(F& f, reserve_section& x) {
  return f("epoch", x.epoch);
}

template <class F>
bool describe(F& f, extent_section& x) {
  return f("bytes", x.bytes);
}

template <class F>
bool describe(F& f, checkpoint_file& x) {
  return f.magic(checkpoint_magic) && f("lsn", x.lsn) && f.checksummed("data", x.data);
}

template <class F>
bool describe(F& f, meta_file& x) {
  return f("format", x.format) &&
         f.check(
             x.format == format_version,
             [&] { return "data dir format " + std::to_string(x.format) + " is not supported"; }) &&
         f("shards", x.shards) &&
         f.check(x.shards >= 1, [] { return std::string{"shards must be at least 1"}; });
}

template <class F>
bool describe(F& f, newest_file& x) {
  return f("segment", x.segment) &&
         f.check(x.segment >= 1, [] { return std::string{"segment must be at least 1"}; });
}

// -- binary visitors ------------------------------------------------------------------------

struct encoder {
  writer w;
  bytes& out;
  size_t region = 0;  ///< where the last records region started

  bool operator()(const char*, uint32_t v) { return w.u32(v), true; }
  bool operator()(const char*, uint64_t v) { return w.u64(v), true; }
  bool magic(std::string_view text) { return w.raw(proto::as_bytes(text)), true; }
  template <class Msg>
  bool check(bool, Msg&&) {
    return true;
  }
  bool records(const char*, const std::vector<byte_view>& v, const byte_view&) {
    w.u32(static_cast<uint32_t>(v.size()));
    region = out.size();
    for (auto& r : v) {
      w.u32(static_cast<uint32_t>(r.size()));
      w.raw(r);
    }
    return true;
  }
  template <class T>
  bool list(const char*, std::vector<T>& v, size_t) {
    w.u32(static_cast<uint32_t>(v.size()));
    for (auto& x : v)
      describe(*this, x);
    return true;
  }
  bool checksummed(const char*, const bytes& v) {
    w.u32(static_cast<uint32_t>(v.size()));
    w.u32(proto::crc32c(v.data(), v.size()));
    w.raw(v);
    return true;
  }
};

/// `count` records of `(len:u32 bytes)`, as views into `in` (which `r` reads).
bool read_records(reader& r, byte_view in, uint32_t count, std::vector<byte_view>& out) {
  out.clear();
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t len = 0;
    if (!r.u32(len, "record length")) return false;
    size_t at = r.offset();
    if (!r.skip(len, "record")) return false;
    out.push_back(in.subspan(at, len));
  }
  return true;
}

struct decoder {
  reader& r;
  byte_view in;

  bool operator()(const char* n, uint32_t& v) { return r.u32(v, n); }
  bool operator()(const char* n, uint64_t& v) { return r.u64(v, n); }
  bool magic(std::string_view text) {
    if (r.remaining() < text.size() ||
        std::memcmp(in.data() + r.offset(), text.data(), text.size()) != 0)
      return r.fail(err_code::io, "magic \"" + std::string(text) + "\" missing");
    return r.skip(text.size(), "magic");
  }
  template <class Msg>
  bool check(bool ok, Msg&& message) {
    return ok || r.fail(err_code::io, message());
  }
  bool records(const char* n, std::vector<byte_view>& v, byte_view& region) {
    uint32_t count = 0;
    if (!r.count(count, 4, n)) return false;
    size_t start = r.offset();
    if (!read_records(r, in, count, v)) return false;
    region = in.subspan(start, r.offset() - start);
    return true;
  }
  template <class T>
  bool list(const char* n, std::vector<T>& v, size_t min_item) {
    uint32_t count = 0;
    if (!r.count(count, min_item, n)) return false;
    v.clear();
    for (uint32_t i = 0; i < count; ++i) {
      T x{};
      if (!describe(*this, x)) return false;
      v.push_back(x);
    }
    return true;
  }
  bool checksummed(const char* n, bytes& v) {
    uint32_t len = 0, crc = 0;
    if (!r.u32(len, n) || !r.u32(crc, n)) return false;
    if (r.remaining() != len)
      return r.fail(err_code::io, std::string{n} + ": " + std::to_string(len) +
                                      " bytes announced, " + std::to_string(r.remaining()) +
                                      " present");
    v.assign(in.begin() + static_cast<ptrdiff_t>(r.offset()), in.end());
    r.skip(len, n);
    if (proto::crc32c(v.data(), v.size()) != crc)
      return r.fail(err_code::io, std::string{n} + ": checksum mismatch");
    return true;
  }
};

/// Decodes a whole T from `in`: bytes left over are an error when `exact`.
template <class T>
proto::result<T> decode_all(byte_view in, const char* what, bool exact) {
  reader r{in};
  r.set_context(what);
  decoder d{r, in};
  T x{};
  if (!describe(d, x)) return proto::error{err_code::io, r.error()->message};
  if (exact && r.remaining() != 0)
    return proto::error{err_code::io, std::string{what} + ": " + std::to_string(r.remaining()) +
                                          " bytes left over"};
  return x;
}

template <class T>
void encode_into(bytes& out, T x) {
  encoder e{writer{out}, out};
  describe(e, x);
}

// -- the text visitors of fusee.meta and fusee.newest ("key=value" lines) --------------------

struct text_encoder {
  std::string out;
  template <class U>
  bool operator()(const char* key, U v) {
    auto digits = std::to_string(v);
    // A u64 at a fixed width (20 digits), so its file is the same length whatever it holds and
    // can be overwritten in place (fusee.newest).
    if constexpr (sizeof(U) == 8) digits.insert(0, 20 - digits.size(), '0');
    out += std::string{key} + "=" + digits + "\n";
    return true;
  }
  template <class Msg>
  bool check(bool, Msg&&) {
    return true;
  }
};

struct text_decoder {
  std::map<std::string, std::string, std::less<>> values;
  std::string error;
  template <class U>
  bool operator()(const char* key, U& v) {
    auto i = values.find(key);
    if (i == values.end()) return fail(std::string{"`"} + key + "` is missing");
    auto& s = i->second;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || s.empty())
      return fail(std::string{"`"} + key + "` = \"" + s + "\" is not a number up to " +
                  std::to_string(std::numeric_limits<U>::max()));
    values.erase(i);
    return true;
  }
  template <class Msg>
  bool check(bool ok, Msg&& message) {
    return ok || fail(message());
  }
  bool fail(std::string m) {
    if (error.empty()) error = std::move(m);
    return false;
  }
};

/// The tag of a section on disk: its index in `section` + 1.
template <class T>
constexpr uint8_t tag_of() {
  return static_cast<uint8_t>(section{std::in_place_type<T>}.index() + 1);
}

/// Appends tag and section; the offset of a records section's region (0 for the others).
template <class T>
size_t append_tagged(bytes& body, const T& x) {
  body.push_back(tag_of<T>());
  encoder e{writer{body}, body};
  describe(e, const_cast<T&>(x));  // describe() takes references for decoding; encoding only reads
  return e.region;
}

/// CRC32C(len ++ seq ++ prev_crc ++ body).
uint32_t batch_crc(const batch_header& h, byte_view body) {
  uint8_t head[16];  // len, seq, prev_crc: little-endian, as the header holds them
  auto put = [&](size_t at, uint64_t v, int n) {
    for (int i = 0; i < n; ++i)
      head[at + i] = static_cast<uint8_t>(v >> (8 * i));
  };
  put(0, h.len, 4);
  put(4, h.seq, 8);
  put(12, h.prev_crc, 4);
  return proto::crc32c(body.data(), body.size(), proto::crc32c(head, sizeof head));
}

}  // namespace

bytes encode(const segment_header& h) {
  bytes out;
  encode_into(out, h);
  return out;
}

bytes encode_batch(uint64_t seq, uint32_t prev_crc, byte_view body) {
  bytes out;
  encode_batch_into(out, seq, prev_crc, body);
  return out;
}

void encode_batch_into(bytes& out, uint64_t seq, uint32_t prev_crc, byte_view body) {
  batch_header h{static_cast<uint32_t>(body.size()), seq, prev_crc, 0};
  h.crc = batch_crc(h, body);
  out.clear();
  out.reserve(batch_header_size + body.size());
  encode_into(out, h);
  out.insert(out.end(), body.begin(), body.end());
}

bool batch_checksum_ok(const batch_header& h, byte_view body) {
  return body.size() == h.len && batch_crc(h, body) == h.crc;
}

size_t append_section(bytes& body, const records_section& s) {
  return append_tagged(body, s);
}

size_t append_section(bytes& body, const grant_section& s) {
  return append_tagged(body, s);
}

size_t append_section(bytes& body, const snapshot_section& s) {
  return append_tagged(body, s);
}

size_t append_section(bytes& body, const reserve_section& s) {
  return append_tagged(body, s);
}

size_t append_section(bytes& body, const extent_section& s) {
  return append_tagged(body, s);
}

size_t append_section(bytes& body, const section& s) {
  return std::visit([&](const auto& x) { return append_tagged(body, x); }, s);
}

bytes encode(const checkpoint_file& c) {
  bytes out;
  encode_into(out, c);
  return out;
}

template <class T>
std::string encode_text(const T& x) {
  text_encoder e;
  auto copy = x;
  describe(e, copy);
  return e.out;
}

std::string encode(const meta_file& m) {
  return encode_text(m);
}

std::string encode(const newest_file& n) {
  return encode_text(n);
}

proto::result<segment_header> decode_segment_header(byte_view in) {
  return decode_all<segment_header>(in.first(std::min(in.size(), segment_header_size)),
                                    "segment header", true);
}

proto::result<batch_header> decode_batch_header(byte_view in) {
  return decode_all<batch_header>(in.first(std::min(in.size(), batch_header_size)), "batch header",
                                  true);
}

proto::result<std::vector<section>> decode_sections(byte_view body) {
  std::vector<section> out;
  reader r{body};
  decoder d{r, body};
  while (r.remaining() > 0) {
    uint8_t tag = 0;
    r.u8(tag, "section tag");
    bool ok = false;
    if (tag == tag_of<records_section>()) {
      r.set_context("records section");
      records_section x;
      ok = describe(d, x);
      out.emplace_back(std::move(x));
    } else if (tag == tag_of<grant_section>()) {
      r.set_context("grant section");
      grant_section x;
      ok = describe(d, x);
      out.emplace_back(x);
    } else if (tag == tag_of<snapshot_section>()) {
      r.set_context("snapshot section");
      snapshot_section x;
      ok = describe(d, x);
      out.emplace_back(std::move(x));
    } else if (tag == tag_of<reserve_section>()) {
      r.set_context("reserve section");
      reserve_section x;
      ok = describe(d, x);
      out.emplace_back(x);
    } else if (tag == tag_of<extent_section>()) {
      r.set_context("extent section");
      extent_section x;
      ok = describe(d, x);
      out.emplace_back(x);
    } else {
      r.fail(err_code::io, "unknown section tag " + std::to_string(tag) + " at body offset " +
                               std::to_string(r.offset() - 1) +
                               " (a log written by a newer fusee?)");
    }
    if (!ok || !r.ok()) return proto::error{err_code::io, r.error()->message};
  }
  return out;
}

proto::result<std::vector<byte_view>> decode_records(byte_view region, uint32_t count) {
  reader r{region};
  r.set_context("records");
  std::vector<byte_view> out;
  if (!read_records(r, region, count, out)) return proto::error{err_code::io, r.error()->message};
  return out;
}

proto::result<checkpoint_file> decode_checkpoint(byte_view in) {
  return decode_all<checkpoint_file>(in, "checkpoint", true);
}

/// "key=value" lines: all of T's keys and no other.
template <class T>
proto::result<T> decode_text(std::string_view text) {
  text_decoder d;
  size_t line_no = 0;
  for (size_t start = 0; start < text.size();) {
    auto end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    auto line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (line.empty()) continue;
    auto eq = line.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return proto::error{err_code::io, "line " + std::to_string(line_no) +
                                            " is not key=value: not a Fusee data dir?"};
    d.values.emplace(std::string(line.substr(0, eq)), std::string(line.substr(eq + 1)));
  }
  T x;
  if (!describe(d, x)) return proto::error{err_code::io, d.error};
  if (!d.values.empty())
    return proto::error{err_code::io, "unknown key `" + d.values.begin()->first + "`"};
  return x;
}

proto::result<meta_file> decode_meta(std::string_view text) {
  return decode_text<meta_file>(text);
}

proto::result<newest_file> decode_newest(std::string_view text) {
  return decode_text<newest_file>(text);
}

std::string segment_name(uint64_t seq) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "seg-%016llx.wal", static_cast<unsigned long long>(seq));
  return buf;
}

std::optional<uint64_t> parse_segment_name(std::string_view name) {
  if (name.size() != 4 + 16 + 4 || !name.starts_with("seg-") || !name.ends_with(".wal"))
    return std::nullopt;
  auto hex = name.substr(4, 16);
  for (char c : hex)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  uint64_t seq = 0;
  std::from_chars(hex.data(), hex.data() + hex.size(), seq, 16);
  return seq;
}

}  // namespace fusee::server::wal
