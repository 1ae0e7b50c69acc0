#include "worker/journal.hpp"

#include <array>
#include <type_traits>

#include "protocol/shard_hash.hpp"

namespace fusee::worker {

const char* op_name(op_kind k) {
  switch (k) {
  case op_kind::step:
    return "step";
  case op_kind::sleep:
    return "sleep";
  case op_kind::wait:
    return "wait_for";
  case op_kind::send:
    return "send";
  case op_kind::child:
    return "start_child";
  case op_kind::now:
    return "now";
  case op_kind::random:
    return "random";
  }
  return "?";
}

const char* status_name(run_status s) {
  switch (s) {
  case run_status::running:
    return "running";
  case run_status::completed:
    return "completed";
  case run_status::failed:
    return "failed";
  case run_status::cancelled:
    return "cancelled";
  }
  return "?";
}

namespace {

using namespace rec;

/// A record's last field, added after records of its kind were written: encoded only when not
/// empty, decoded as empty when the record ends before it.
struct tail {
  std::string& v;
};

// describe(f, x) lists a record's fields in their on-disk order; f(name, field) encodes or
// decodes one.
template <class F>
bool describe(F& f, started& x) {
  return f("workflow", x.workflow) && f("type", x.type) && f("input", x.input) &&
         f("parent", x.parent) && f("from", x.from) && f("outbox", x.outbox) && f("at_ms", x.at_ms);
}
template <class F>
bool describe(F& f, op_done& x) {
  return f("workflow", x.workflow) && f("seq", x.seq) && f("op", x.op) && f("name", x.name) &&
         f("ok", x.ok) && f("value", x.value);
}
template <class F>
bool describe(F& f, timer_set& x) {
  return f("workflow", x.workflow) && f("seq", x.seq) && f("op", x.op) && f("name", x.name) &&
         f("due_ms", x.due_ms);
}
template <class F>
bool describe(F& f, signal& x) {
  return f("workflow", x.workflow) && f("name", x.name) && f("payload", x.payload) &&
         f("from", x.from) && f("outbox", x.outbox) && f("at_ms", x.at_ms) && f("key", tail{x.key});
}
template <class F>
bool describe(F& f, sent& x) {
  return f("workflow", x.workflow) && f("seq", x.seq) && f("op", x.op) && f("name", x.name) &&
         f("outbox", x.outbox) && f("target", x.target) && f("payload", x.payload);
}
template <class F>
bool describe(F& f, acked& x) {
  return f("outbox", x.outbox);
}
template <class F>
bool describe(F& f, finished& x) {
  return f("workflow", x.workflow) && f("status", x.status) && f("value", x.value) &&
         f("at_ms", x.at_ms);
}
template <class F>
bool describe(F& f, seen& x) {
  return f("from", x.from) && f("outbox", x.outbox) && f("at_ms", x.at_ms);
}
template <class F>
bool describe(F& f, forgotten& x) {
  return f("workflow", x.workflow);
}
template <class F>
bool describe(F& f, signal_key& x) {
  return f("workflow", x.workflow) && f("key", x.key) && f("at_ms", x.at_ms) &&
         f("digest", x.digest);
}
template <class F>
bool describe(F& f, retry& x) {
  return f("workflow", x.workflow) && f("seq", x.seq) && f("name", x.name) &&
         f("attempt", x.attempt) && f("due_ms", x.due_ms) && f("error", x.error);
}

/// Record kinds on disk: the variant's index + 1. Never reorder the variant.
constexpr std::array<const char*, std::variant_size_v<record>> kind_names{
    "started",  "op_done", "timer_set", "signal",    "sent",      "acked",
    "finished", "seen",    "retry",     "forgotten", "signal_key"};

struct encoder {
  proto::writer w;
  bool operator()(const char*, const std::string& v) { return w.str(v), true; }
  bool operator()(const char*, tail t) { return t.v.empty() || (w.str(t.v), true); }
  bool operator()(const char*, uint8_t v) { return w.u8(v), true; }
  bool operator()(const char*, uint32_t v) { return w.varint(v), true; }
  bool operator()(const char*, uint64_t v) { return w.varint(v), true; }
  bool operator()(const char*, op_kind v) { return w.u8(static_cast<uint8_t>(v)), true; }
  bool operator()(const char*, run_status v) { return w.u8(static_cast<uint8_t>(v)), true; }
};

struct decoder {
  proto::reader r;
  bool operator()(const char* n, std::string& v) { return r.str(v, n); }
  bool operator()(const char* n, tail t) {
    if (r.remaining() == 0) return true;  // written before the field existed, or left empty
    if (!r.str(t.v, n)) return false;
    // Present means not empty: one encoding per record (an empty one is written as absent).
    return !t.v.empty() || r.fail(proto::err_code::bad_body, std::string{n} + " present but empty");
  }
  bool operator()(const char* n, uint8_t& v) { return r.u8(v, n); }
  bool operator()(const char* n, uint32_t& v) {
    uint64_t x = 0;
    if (!r.varint(x, n)) return false;
    if (x > 0xFFFFFFFFu) return r.fail(proto::err_code::bad_body, std::string{n} + " over 2^32");
    v = static_cast<uint32_t>(x);
    return true;
  }
  bool operator()(const char* n, uint64_t& v) { return r.varint(v, n); }
  bool operator()(const char* n, op_kind& v) {
    uint8_t x = 0;
    if (!r.u8(x, n)) return false;
    if (x < 1 || x > static_cast<uint8_t>(op_kind::random))
      return r.fail(proto::err_code::bad_body, "unknown operation kind " + std::to_string(x));
    v = static_cast<op_kind>(x);
    return true;
  }
  bool operator()(const char* n, run_status& v) {
    uint8_t x = 0;
    if (!r.u8(x, n)) return false;
    if (x > static_cast<uint8_t>(run_status::cancelled))
      return r.fail(proto::err_code::bad_body, "unknown run status " + std::to_string(x));
    v = static_cast<run_status>(x);
    return true;
  }
};

template <size_t I = 0>
bool decode_kind(size_t kind, decoder& d, record& out) {
  if constexpr (I < std::variant_size_v<record>) {
    if (kind != I) return decode_kind<I + 1>(kind, d, out);
    std::variant_alternative_t<I, record> x;
    if (!describe(d, x)) return false;
    out = std::move(x);
    return true;
  } else {
    return false;
  }
}

constexpr std::array<uint8_t, 4> checkpoint_magic{'F', 'W', 'C', '1'};

}  // namespace

uint64_t signal_digest(const std::string& name, const std::string& payload) {
  std::string both;
  both.reserve(name.size() + 1 + payload.size());
  both.append(name).push_back('\0');
  both.append(payload);
  return proto::fnv1a64(both);
}

proto::bytes encode(const record& r) {
  proto::bytes out;
  encoder e{proto::writer{out}};
  e.w.u8(static_cast<uint8_t>(r.index() + 1));
  std::visit([&](const auto& x) { describe(e, const_cast<std::decay_t<decltype(x)>&>(x)); }, r);
  return out;
}

proto::result<record> decode_record(proto::byte_view data) {
  decoder d{proto::reader{data}};
  uint8_t kind = 0;
  if (!d.r.u8(kind, "kind")) return *d.r.error();
  if (kind == 0 || kind > kind_names.size())
    return proto::error{proto::err_code::bad_body, "journal record of unknown kind " +
                                                       std::to_string(kind) +
                                                       " (written by a newer runtime?)"};
  d.r.set_context(kind_names[kind - 1]);
  record out;
  if (!decode_kind(kind - 1, d, out)) return *d.r.error();
  if (d.r.remaining() != 0)
    return proto::error{proto::err_code::bad_body,
                        std::string{kind_names[kind - 1]} + ": " + std::to_string(d.r.remaining()) +
                            " bytes left over (a field added by a newer runtime?)"};
  return out;
}

proto::bytes encode_checkpoint(const std::vector<record>& records) {
  proto::bytes out(checkpoint_magic.begin(), checkpoint_magic.end());
  proto::writer w{out};
  w.count(records.size());
  for (auto& r : records)
    w.blob(encode(r));
  return out;
}

proto::result<std::vector<record>> decode_checkpoint(proto::byte_view data) {
  if (data.size() < 4 ||
      !std::equal(checkpoint_magic.begin(), checkpoint_magic.end(), data.begin()))
    return proto::error{proto::err_code::bad_body, "checkpoint: not written by this runtime"};
  proto::reader r{data.subspan(4)};
  r.set_context("checkpoint");
  uint32_t n = 0;
  if (!r.count(n, 1, "records")) return *r.error();
  std::vector<record> out;
  out.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    proto::byte_view v;
    if (!r.blob_view(v, "record")) return *r.error();
    auto rec = decode_record(v);
    if (!rec)
      return proto::error{proto::err_code::bad_body,
                          "checkpoint record " + std::to_string(i) + ": " + rec.err().message};
    out.push_back(std::move(*rec));
  }
  if (r.remaining() != 0)
    return proto::error{proto::err_code::bad_body, "checkpoint: bytes left over"};
  return out;
}

}  // namespace fusee::worker
