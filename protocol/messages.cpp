#include "protocol/messages.hpp"

#include "protocol/json_text.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <type_traits>
#include <utility>

namespace fusee::proto {

namespace {

// -- field descriptions ---------------------------------------------------------------------
// describe(f, x) lists the fields of x in wire order and the rules they must keep. The same
// function drives the encoder, the decoder and the validator, so layout and rules cannot drift
// apart. f(name, field) encodes or decodes one field; f.check(cond, code, message) states a rule
// at the point where the decoder can first test it (version and offers before the fields whose
// presence depends on them); f.rest(name, bytes) is "the remaining bytes".

template <class F>
bool shardless(F& f, const request_head& h, const char* what) {
  return f.check(h.shard == no_shard && h.epoch == epoch_t{0}, err_code::bad_body, [&] {
    return std::string{what} + " concerns no single shard: its head must carry shard " +
           "0xFFFFFFFF and epoch 0, not shard " + std::to_string(h.shard.value()) + " epoch " +
           std::to_string(h.epoch.value());
  });
}

/// `version:u32`, checked as soon as it is read (PROTOCOL.md §5: right after the head).
template <class F>
bool version_field(F& f, uint32_t& version) {
  return f("version", version) && f.check(version == protocol_version, err_code::version, [&] {
    return "protocol version " + std::to_string(version) + " is not supported (this side speaks " +
           std::to_string(protocol_version) + ")";
  });
}

template <class F>
bool describe(F& f, request_head& x) {
  return f("id", x.id) && f("shard", x.shard) && f("epoch", x.epoch);
}

template <class F>
bool describe(F& f, grant_entry& x) {
  return f("shard", x.shard) && f("epoch", x.epoch) && f("durable_lsn", x.durable_lsn);
}

template <class F>
bool describe(F& f, shard_range& x) {
  return f("first", x.first) && f("last", x.last) &&
         f.check(x.first <= x.last, err_code::bad_body, [&] {
           return "shard range " + std::to_string(x.first) + "-" + std::to_string(x.last) +
                  " ends before it starts";
         });
}

template <class F>
bool describe(F& f, map_node& x) {
  return f("name", x.name) && f("listen", x.listen) && f("http", x.http) && f("shards", x.shards);
}

template <class F>
bool describe(F& f, position& x) {
  return f("shard", x.shard) && f("epoch", x.epoch) && f("lsn", x.lsn);
}

template <class F>
bool describe(F& f, shard_epoch& x) {
  return f("shard", x.shard) && f("epoch", x.epoch);
}

template <class F>
bool describe(F& f, idle_entry& x) {
  return f("shard", x.shard) && f("epoch", x.epoch) && f("flags", x.flags) &&
         f.check(
             (x.flags & ~(idle_busy | idle_expired)) == 0, err_code::bad_body,
             [&] { return "idle entry flags " + std::to_string(x.flags) + " has unknown bits"; }) &&
         f("due_in_ms", x.due_in_ms) && f("steps", x.steps) && f("open_us", x.open_us) &&
         f("types", x.types);
}

template <class F>
bool describe(F& f, hello& x) {
  return f("head", x.head) && version_field(f, x.version) && f("offers", x.offers) &&
         f.check((x.offers & ~known_offers) == 0, err_code::bad_offer,
                 [&] {
                   char hex[16];
                   std::snprintf(hex, sizeof(hex), "0x%x", x.offers);
                   return std::string{"offers "} + hex +
                          " include unknown bits (known: INVOKED=1, SERVE_CALLS=2, CLUSTER_MAP=4)";
                 }) &&
         f("max_shards", x.max_shards) &&
         ((x.offers & offer_invoked) == 0 ||
          (f("invocation", x.invocation) &&
           f.check(x.invocation != invocation_id{0}, err_code::unknown_invocation,
                   [] { return std::string{"invocation id 0 is never issued"}; }))) &&
         f("name", x.name) && f("types", x.types) && shardless(f, x.head, "HELLO");
}

template <class F, class A>
requires std::same_as<A, append> || std::same_as<A, append_view>
bool describe(F& f, A& x) {
  return f("head", x.head) && f("first_lsn", x.first_lsn) &&
         f.check(x.first_lsn.value() >= 1, err_code::bad_body,
                 [] { return std::string{"first_lsn 0: LSNs start at 1"}; }) &&
         f("records", x.records) && f.check(!x.records.empty(), err_code::bad_body, [] {
           return std::string{"an APPEND must carry at least one record"};
         });
}

template <class F>
bool describe(F& f, recover_log& x) {
  return f("head", x.head) && f("after_lsn", x.after_lsn) && f("max_bytes", x.max_bytes);
}

template <class F>
bool describe(F& f, checkpoint& x) {
  return f("head", x.head) && f("lsn", x.lsn) && f("data", x.data);
}

template <class F>
bool describe(F& f, load_checkpoint& x) {
  return f("head", x.head);
}

template <class F>
bool describe(F& f, ping& x) {
  return f("head", x.head) && shardless(f, x.head, "PING");
}

template <class F>
bool describe(F& f, client_hello& x) {
  return f("head", x.head) && version_field(f, x.version) && f("name", x.name) &&
         shardless(f, x.head, "CLIENT_HELLO");
}

template <class F>
bool describe(F& f, call& x) {
  return f("head", x.head) && f("method", x.method) && f("type", x.type) && f("args", x.args) &&
         f("park_ms", x.park_ms);
}

template <class F>
bool describe(F& f, call_reply& x) {
  return f("head", x.head) && f("relay", x.relay) && f("ok", x.ok) &&
         f.check(x.ok <= 1, err_code::bad_body,
                 [&] { return "ok must be 0 or 1, not " + std::to_string(x.ok); }) &&
         f("body", x.body);
}

template <class F>
bool describe(F& f, relay& x) {
  return f("head", x.head) && f("target", x.target) && f("outbox_id", x.outbox_id) &&
         f("payload", x.payload);
}

template <class F>
bool describe(F& f, message_ack& x) {
  return f("head", x.head) && f("from", x.from) && f("from_epoch", x.from_epoch) &&
         f("outbox_id", x.outbox_id);
}

template <class F>
bool describe(F& f, drain& x) {
  return f("head", x.head) && f("shards", x.shards) && shardless(f, x.head, "DRAIN");
}

template <class F>
bool describe(F& f, idle& x) {
  return f("head", x.head) && f("entries", x.entries) && shardless(f, x.head, "IDLE");
}

template <class F>
bool describe(F& f, release& x) {
  return f("head", x.head);
}

template <class F>
bool describe(F& f, ok& x) {
  return f("id", x.id) && f.rest("payload", x.payload);
}

template <class F>
bool describe(F& f, err& x) {
  return f("id", x.id) && f("code", x.code) &&
         f.check(x.code != 0, err_code::bad_body, [] { return std::string{"ERR code 0"}; }) &&
         f("message", x.message);
}

template <class F>
bool describe(F& f, lease& x) {
  return f("id", x.id) && f("shard_count", x.shard_count) &&
         f("ping_interval_ms", x.ping_interval_ms) && f("timeout_ms", x.timeout_ms) &&
         f("remaining_ms", x.remaining_ms) && f("grants", x.grants);
}

template <class F>
bool describe(F& f, grant& x) {
  return f("id", x.id) && f("grants", x.grants);
}

template <class F>
bool describe(F& f, durable& x) {
  return f("id", x.id) && f("positions", x.positions);
}

template <class F>
bool describe(F& f, log_page& x) {
  return f("id", x.id) && f("shard", x.shard) && f("first_lsn", x.first_lsn) &&
         f("records", x.records) && f("more", x.more) &&
         f.check(x.more <= 1, err_code::bad_body,
                 [&] { return "more must be 0 or 1, not " + std::to_string(x.more); }) &&
         f("durable_lsn", x.durable_lsn);
}

template <class F>
bool describe(F& f, checkpoint_data& x) {
  return f("id", x.id) && f("lsn", x.lsn) && f("data", x.data);
}

template <class F>
bool describe(F& f, relayed_call& x) {
  return f("id", x.id) && f("relay", x.relay) && f("shard", x.shard) && f("method", x.method) &&
         f("type", x.type) && f("args", x.args);
}

template <class F>
bool describe(F& f, call_result& x) {
  return f("id", x.id) && f("status", x.status) &&
         f.check(
             x.status <= static_cast<uint8_t>(call_status::bad_request), err_code::bad_body,
             [&] { return "CALL_RESULT status " + std::to_string(x.status) + " is not 0-4"; }) &&
         f("body", x.body);
}

template <class F>
bool describe(F& f, message& x) {
  return f("id", x.id) && f("target", x.target) && f("from", x.from) &&
         f("from_epoch", x.from_epoch) && f("outbox_id", x.outbox_id) && f("payload", x.payload);
}

template <class F>
bool describe(F& f, ack& x) {
  return f("id", x.id) && f("from", x.from) && f("from_epoch", x.from_epoch) &&
         f("outbox_id", x.outbox_id);
}

template <class F>
bool describe(F& f, revoked& x) {
  return f("id", x.id) && f("shards", x.shards) && f("reason", x.reason);
}

template <class F>
bool describe(F& f, io_failed& x) {
  return f("id", x.id) && f("shard", x.shard) && f("epoch", x.epoch) && f("message", x.message);
}

template <class F>
bool describe(F& f, cluster_map_frame& x) {
  return f("id", x.id) && f("digest", x.digest) && f("node", x.node) && f("nodes", x.nodes);
}

/// A nonce or proof of the token extension: exactly 32 bytes.
template <class F>
bool fixed_32(F& f, const char* name, bytes& v) {
  return f(name, v) && f.check(v.size() == 32, err_code::bad_body, [&] {
    return std::string{name} + " must be 32 bytes, not " + std::to_string(v.size());
  });
}

template <class F>
bool describe(F& f, auth_hello& x) {
  return f("head", x.head) && f("version", x.version) &&
         f.check(x.version == 1, err_code::version,
                 [&] {
                   return "token extension version " + std::to_string(x.version) +
                          " is not supported (this side speaks 1)";
                 }) &&
         fixed_32(f, "nonce", x.nonce) && shardless(f, x.head, "AUTH");
}

template <class F>
bool describe(F& f, auth_response& x) {
  return f("head", x.head) && fixed_32(f, "proof", x.proof) && shardless(f, x.head, "AUTH_PROOF");
}

template <class F>
bool describe(F& f, auth_challenge& x) {
  return f("id", x.id) && fixed_32(f, "nonce", x.nonce);
}

template <class F>
bool describe(F& f, auth_ok& x) {
  return f("id", x.id) && f("scope", x.scope) &&
         f.check(x.scope >= 1 && x.scope <= 3, err_code::bad_body,
                 [&] { return "scope " + std::to_string(x.scope) + " is not 1, 2 or 3"; }) &&
         f("token", x.token) && fixed_32(f, "proof", x.proof);
}

template <class T>
struct is_strong : std::false_type {};
template <class Tag, class Rep>
struct is_strong<strong<Tag, Rep>> : std::true_type {};

template <class T>
constexpr size_t min_wire_size() {
  if constexpr (std::is_integral_v<T>)
    return sizeof(T);
  else if constexpr (is_strong<T>::value)
    return sizeof(typename T::rep);
  else
    return 1;  // a blob's length byte; structs are at least that
}

/// True if T has a field description for visitor F (messages and their parts, not primitives).
template <class F, class T>
concept describable = requires(F& f, T& x) {
  describe(f, x);
};

// -- the three visitors ---------------------------------------------------------------------

/// Writes fields. describe() takes non-const references; the encoder only reads them.
struct encoder {
  writer w;

  bool operator()(const char*, uint8_t v) { return w.u8(v), true; }
  bool operator()(const char*, uint16_t v) { return w.u16(v), true; }
  bool operator()(const char*, uint32_t v) { return w.u32(v), true; }
  bool operator()(const char*, uint64_t v) { return w.u64(v), true; }
  template <class Tag, class Rep>
  bool operator()(const char* n, strong<Tag, Rep> v) {
    return (*this)(n, v.value());
  }
  bool operator()(const char*, const std::string& v) { return w.str(v), true; }
  bool operator()(const char*, bytes& v) {
    return w.blob(v), true;
  }  // not const: must beat vector<T>&
  template <class T>
  bool operator()(const char* n, std::vector<T>& v) {
    w.count(v.size());
    for (auto& x : v)
      (*this)(n, x);
    return true;
  }
  template <class T>
  requires describable<encoder, T>
  bool operator()(const char*, T& x) { return describe(*this, x); }
  bool rest(const char*, const bytes& v) { return w.raw(v), true; }
  template <class Msg>
  bool check(bool, err_code, Msg&&) {
    return true;
  }
};

/// The most items a decoded list reserves before any of them is read.
constexpr uint32_t max_reserved_items = 1024;

/// Reads fields and applies rules as soon as their fields are read.
struct decoder {
  reader& r;
  /// Strings and records the frame's lists may still hold, frame-wide (max_list_strings,
  /// max_list_records).
  uint64_t strings_left = max_list_strings(r.remaining());
  uint64_t records_left = max_list_records(r.remaining());

  bool operator()(const char* n, uint8_t& v) { return r.u8(v, n); }
  bool operator()(const char* n, uint16_t& v) { return r.u16(v, n); }
  bool operator()(const char* n, uint32_t& v) { return r.u32(v, n); }
  bool operator()(const char* n, uint64_t& v) { return r.u64(v, n); }
  template <class Tag, class Rep>
  bool operator()(const char* n, strong<Tag, Rep>& v) {
    Rep raw{};
    if (!(*this)(n, raw)) return false;
    v = strong<Tag, Rep>{raw};
    return true;
  }
  bool operator()(const char* n, std::string& v) { return r.str(v, n); }
  bool operator()(const char* n, bytes& v) {
    byte_view view;
    if (!(*this)(n, view)) return false;
    v.assign(view.begin(), view.end());
    return true;
  }
  bool operator()(const char* n, byte_view& v) { return r.blob_view(v, n); }
  /// Takes `count` items of list `n` from the frame's budget `left` (`allowed` for the whole
  /// body: one item per `per` bytes); else TOO_LARGE naming the bound and `what` it counts.
  bool take(uint64_t& left, uint32_t count, const char* n, uint64_t (*allowed)(uint64_t),
            const char* what, int per) {
    if (count <= left) {
      left -= count;
      return true;
    }
    return r.fail(err_code::too_large, std::string{n} + ": the frame's lists hold more than " +
                                           std::to_string(allowed(r.offset() + r.remaining())) +
                                           " " + what + " (one per " + std::to_string(per) +
                                           " bytes of the body, and at least 4096 in any frame)");
  }
  template <class T>
  bool operator()(const char* n, std::vector<T>& v) {
    uint32_t count = 0;
    if (!r.count(count, min_wire_size<T>(), n)) return false;
    if constexpr (std::is_same_v<T, std::string>) {
      if (!take(strings_left, count, n, max_list_strings, "strings", 16)) return false;
    } else if constexpr (std::is_same_v<T, bytes> || std::is_same_v<T, byte_view>) {
      if (!take(records_left, count, n, max_list_records, "records", 4)) return false;
    }
    v.clear();
    // Room up front for a list of ordinary length only: a hostile count that fits the body's
    // bytes must not reserve count * sizeof(T); longer lists grow as their items decode.
    v.reserve(std::min<uint32_t>(count, max_reserved_items));
    for (uint32_t i = 0; i < count; ++i) {
      T item{};
      if (!(*this)(n, item)) return false;
      v.push_back(std::move(item));
    }
    return true;
  }
  template <class T>
  requires describable<decoder, T>
  bool operator()(const char*, T& x) { return describe(*this, x); }
  bool rest(const char*, bytes& v) { return r.rest(v); }
  template <class Msg>
  bool check(bool cond, err_code code, Msg&& msg) {
    return cond || r.fail(code, msg());
  }
};

/// Applies the rules without any bytes; the first broken rule is kept.
struct checker {
  std::optional<error> failure;

  template <class T>
  bool operator()(const char*, T&) {
    return true;
  }
  template <class T>
  requires describable<checker, T>
  bool operator()(const char*, T& x) { return describe(*this, x); }
  bool operator()(const char*, std::string&) { return true; }
  bool operator()(const char*, bytes& v) {
    if (v.size() <= max_record_size) return true;
    failure = error{err_code::too_large, "a byte field exceeds the record limit"};
    return false;
  }
  template <class T>
  bool operator()(const char* n, std::vector<T>& v) {
    for (auto& x : v)
      if (!(*this)(n, x)) return false;
    return true;
  }
  template <class Tag, class Rep>
  bool operator()(const char*, strong<Tag, Rep>&) {
    return true;
  }
  bool rest(const char*, bytes&) { return true; }
  template <class Msg>
  bool check(bool cond, err_code code, Msg&& msg) {
    if (cond) return true;
    failure = error{code, msg()};
    return false;
  }
};

/// Decodes `body` as a T (a message of kind `k`, or a view of one).
template <class T>
result<T> decode_body_as(kind k, byte_view body) {
  reader r{body};
  auto label = kind_name(static_cast<uint8_t>(k));
  r.set_context(label);
  r.set_blob_limit(max_record_size);  // PROTOCOL.md §10: a longer bytes or str is TOO_LARGE
  decoder d{r};
  T x{};
  if (!describe(d, x)) return *r.error();
  if (r.remaining() != 0)
    return fail(err_code::bad_body,
                label + ": " + std::to_string(r.remaining()) + " bytes left over after the body");
  return x;
}

template <class T>
result<any_message> decode_as(byte_view body) {
  auto x = decode_body_as<T>(T::tag, body);
  if (!x) return x.err();
  return any_message{std::move(*x)};
}

using decode_fn = result<any_message> (*)(byte_view);

template <size_t... I>
constexpr std::array<decode_fn, 128> make_decoders(std::index_sequence<I...>) {
  std::array<decode_fn, 128> t{};
  ((t[static_cast<uint8_t>(std::variant_alternative_t<I, any_message>::tag)] =
        &decode_as<std::variant_alternative_t<I, any_message>>),
   ...);
  return t;
}

constexpr auto decoders =
    make_decoders(std::make_index_sequence<std::variant_size_v<any_message>>{});

}  // namespace

std::string_view call_status_code(call_status status) {
  switch (status) {
  case call_status::ok:
    return "";
  case call_status::failed:
    return "failed";
  case call_status::parked_too_long:
    return "no_holder";
  case call_status::holder_lost:
    return "holder_lost";
  case call_status::bad_request:
    return "bad_request";
  }
  return "";
}

std::string kind_name(uint8_t k) {
  switch (static_cast<kind>(k)) {
  case kind::hello:
    return "HELLO";
  case kind::append:
    return "APPEND";
  case kind::recover_log:
    return "RECOVER_LOG";
  case kind::checkpoint:
    return "CHECKPOINT";
  case kind::load_checkpoint:
    return "LOAD_CHECKPOINT";
  case kind::ping:
    return "PING";
  case kind::client_hello:
    return "CLIENT_HELLO";
  case kind::call:
    return "CALL";
  case kind::call_reply:
    return "CALL_REPLY";
  case kind::relay:
    return "RELAY";
  case kind::message_ack:
    return "MESSAGE_ACK";
  case kind::drain:
    return "DRAIN";
  case kind::idle:
    return "IDLE";
  case kind::release:
    return "RELEASE";
  case kind::ok:
    return "OK";
  case kind::err:
    return "ERR";
  case kind::lease:
    return "LEASE";
  case kind::grant:
    return "GRANT";
  case kind::durable:
    return "DURABLE";
  case kind::log_page:
    return "LOG_PAGE";
  case kind::checkpoint_data:
    return "CHECKPOINT_DATA";
  case kind::relayed_call:
    return "RELAYED_CALL";
  case kind::call_result:
    return "CALL_RESULT";
  case kind::message:
    return "MESSAGE";
  case kind::ack:
    return "ACK";
  case kind::revoked:
    return "REVOKED";
  case kind::io_failed:
    return "IO_FAILED";
  case kind::cluster_map:
    return "CLUSTER_MAP";
  case kind::auth:
    return "AUTH";
  case kind::auth_proof:
    return "AUTH_PROOF";
  case kind::auth_challenge:
    return "AUTH_CHALLENGE";
  case kind::auth_ok:
    return "AUTH_OK";
  }
  return "kind " + std::to_string(k);
}

kind kind_of(const any_message& m) {
  return std::visit([](const auto& x) { return std::decay_t<decltype(x)>::tag; }, m);
}

void encode_body(const any_message& m, bytes& out) {
  std::visit(
      [&](const auto& x) {
        encoder e{writer{out}};
        describe(e, const_cast<std::decay_t<decltype(x)>&>(x));
      },
      m);
}

void append_frame(bytes& out, const any_message& m) {
  bytes body;
  encode_body(m, body);
  append_frame(out, static_cast<uint8_t>(kind_of(m)), body);
}

bytes encode(const any_message& m) {
  bytes out;
  append_frame(out, m);
  return out;
}

result<any_message> decode(uint8_t k, byte_view body) {
  if (k >= decoders.size() || decoders[k] == nullptr)
    return fail(err_code::unknown_kind, "frame kind " + std::to_string(k) + " is not defined");
  return decoders[k](body);
}

result<append_view> decode_append_view(byte_view body) {
  return decode_body_as<append_view>(kind::append, body);
}

result<any_message> decode_request(uint8_t k, byte_view body) {
  if (!is_request_kind(k) || k >= decoders.size() || decoders[k] == nullptr)
    return fail(err_code::unknown_kind,
                "frame kind " + std::to_string(k) + " is not a request this server knows");
  return decoders[k](body);
}

result<any_message> decode_response(uint8_t k, byte_view body) {
  if (is_request_kind(k) || k >= decoders.size() || decoders[k] == nullptr)
    return fail(err_code::unknown_kind,
                "frame kind " + std::to_string(k) + " is not one the server sends");
  return decoders[k](body);
}

call_result call_error(uint64_t id, call_status status, const std::string& message) {
  auto body = json_error(message);
  return call_result{id, static_cast<uint8_t>(status), bytes(body.begin(), body.end())};
}

cluster_map_frame make_cluster_map_frame(uint64_t id, const cluster_map* map,
                                         const std::string& node) {
  cluster_map_frame f;
  f.id = id;
  if (map == nullptr) return f;
  f.digest = map->digest();
  f.node = node;
  for (auto& n : map->nodes)
    f.nodes.push_back(map_node{n.name, n.listen, n.http, n.shards});
  return f;
}

std::optional<error> validate(const any_message& m) {
  return std::visit(
      [](const auto& x) -> std::optional<error> {
        checker c;  // describe() takes references; the checker never writes through them
        describe(c, const_cast<std::decay_t<decltype(x)>&>(x));
        if (c.failure)
          c.failure->message = kind_name(static_cast<uint8_t>(x.tag)) + ": " + c.failure->message;
        return c.failure;
      },
      m);
}

ok make_client_hello_ok(uint64_t id, uint32_t shard_count) {
  ok m{id, {}};
  writer{m.payload}.u32(shard_count);
  return m;
}

std::optional<uint32_t> client_hello_shard_count(const ok& m) {
  reader r{m.payload};
  uint32_t n = 0;
  if (!r.u32(n, "shard_count") || r.remaining() != 0) return std::nullopt;
  return n;
}

}  // namespace fusee::proto
