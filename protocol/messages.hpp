// Every frame kind of PROTOCOL.md §3-§4 as a struct, with one field description per kind that
// drives encoding and decoding, and one validation entry point (validate()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "protocol/cluster_map.hpp"
#include "protocol/frame.hpp"
#include "protocol/ids.hpp"
#include "protocol/result.hpp"
#include "protocol/wire.hpp"

namespace fusee::proto {

inline constexpr uint32_t protocol_version = 1;

/// Frame kinds: 1-63 are requests (to the server), 64-127 come from the server.
enum class kind : uint8_t {
  hello = 1,
  append = 2,
  recover_log = 3,
  checkpoint = 4,
  load_checkpoint = 5,
  ping = 6,
  client_hello = 7,
  call = 8,
  call_reply = 9,
  relay = 10,
  message_ack = 11,
  drain = 12,
  idle = 13,
  release = 14,
  auth = 48,        ///< extension (docs/protocol.md, "Extension: tokens"): starts the proof
  auth_proof = 49,  ///< extension: the client's proof

  ok = 64,
  err = 65,
  lease = 66,
  grant = 67,
  durable = 68,
  log_page = 69,
  checkpoint_data = 70,
  relayed_call = 71,
  call_result = 72,
  message = 73,
  ack = 74,
  revoked = 75,
  io_failed = 76,
  cluster_map = 77,      ///< extension (docs/protocol.md): answers a HELLO offering CLUSTER_MAP
  auth_challenge = 112,  ///< extension: the server's nonce, answering AUTH
  auth_ok = 113,         ///< extension: the token is proven; the server's proof
};

constexpr bool is_request_kind(uint8_t k) {
  return k >= 1 && k <= 63;
}
/// "APPEND"; "kind 99" for kinds the protocol does not define.
std::string kind_name(uint8_t k);

/// HELLO `offers` bits.
inline constexpr uint32_t offer_invoked = 1;      ///< an invoked worker; `invocation` follows
inline constexpr uint32_t offer_serve_calls = 2;  ///< answers relayed calls and messages
/// Extension (docs/protocol.md, "Cluster map"): the server sends CLUSTER_MAP before the LEASE.
inline constexpr uint32_t offer_cluster_map = 4;
inline constexpr uint32_t known_offers = offer_invoked | offer_serve_calls | offer_cluster_map;

/// idle_entry `flags` bits.
inline constexpr uint8_t idle_busy = 1;     ///< work left now
inline constexpr uint8_t idle_expired = 2;  ///< the budget ended
inline constexpr uint64_t nothing_due = 0xFFFFFFFFFFFFFFFFull;

/// CALL_RESULT status.
enum class call_status : uint8_t {
  ok = 0,      ///< the holder answered ok; body is its JSON result
  failed = 1,  ///< the holder answered with an error; body is its JSON error
  parked_too_long = 2,
  holder_lost = 3,  ///< the holder went away with the call in flight: it may have run
  bad_request = 4,
};

/// The `code` an answer of `status` carries when its body has none (the HTTP API's and the
/// command line's errors): "failed", "no_holder", "holder_lost", "bad_request"; "" for ok and for
/// a status this version does not know.
std::string_view call_status_code(call_status status);

// -- shared pieces ----------------------------------------------------------------------------

/// Starts every request body. `shard = no_shard, epoch = 0` for requests about no single shard.
struct request_head {
  uint64_t id = 0;
  shard_id shard = no_shard;
  epoch_t epoch{};
  bool operator==(const request_head&) const = default;
};

struct grant_entry {
  shard_id shard;
  epoch_t epoch;
  lsn_t durable_lsn;
  bool operator==(const grant_entry&) const = default;
};

/// One node of a CLUSTER_MAP: where workers and clients reach it and the shards it serves.
struct map_node {
  std::string name;
  std::string listen;  ///< host:port for workers and clients
  std::string http;    ///< host:port of its HTTP API; empty = none
  std::vector<shard_range> shards;
  bool operator==(const map_node&) const = default;
};

struct position {
  shard_id shard;
  epoch_t epoch;
  lsn_t lsn;
  bool operator==(const position&) const = default;
};

struct shard_epoch {
  shard_id shard;
  epoch_t epoch;
  bool operator==(const shard_epoch&) const = default;
};

struct idle_entry {
  shard_id shard;
  epoch_t epoch;
  uint8_t flags = 0;
  uint64_t due_in_ms = nothing_due;
  uint64_t steps = 0;
  uint64_t open_us = 0;
  std::vector<std::string> types;  ///< workflow types with runs this worker had no code for
  bool operator==(const idle_entry&) const = default;
};

// -- requests -------------------------------------------------------------------------------

struct hello {
  static constexpr kind tag = kind::hello;
  request_head head;
  uint32_t version = protocol_version;
  uint32_t offers = 0;
  uint32_t max_shards = 0;     ///< 0 = all
  invocation_id invocation{};  ///< on the wire only if offers has offer_invoked
  std::string name;
  std::vector<std::string> types;
  bool operator==(const hello&) const = default;
};

struct append {
  static constexpr kind tag = kind::append;
  request_head head;
  lsn_t first_lsn;
  std::vector<bytes> records;
  bool operator==(const append&) const = default;
};

/// An APPEND decoded without copying its records: each view points into the body it was decoded
/// from, which must outlive it (a server hands the frame's body on with the views). The same
/// layout and rules as `append`: one description serves both.
struct append_view {
  request_head head;
  lsn_t first_lsn;
  std::vector<byte_view> records;
};

struct recover_log {
  static constexpr kind tag = kind::recover_log;
  request_head head;
  lsn_t after_lsn;
  uint32_t max_bytes = 0;
  bool operator==(const recover_log&) const = default;
};

struct checkpoint {
  static constexpr kind tag = kind::checkpoint;
  request_head head;
  lsn_t lsn;
  bytes data;
  bool operator==(const checkpoint&) const = default;
};

struct load_checkpoint {
  static constexpr kind tag = kind::load_checkpoint;
  request_head head;
  bool operator==(const load_checkpoint&) const = default;
};

struct ping {
  static constexpr kind tag = kind::ping;
  request_head head;
  bool operator==(const ping&) const = default;
};

struct client_hello {
  static constexpr kind tag = kind::client_hello;
  request_head head;
  uint32_t version = protocol_version;
  std::string name;
  bool operator==(const client_hello&) const = default;
};

struct call {
  static constexpr kind tag = kind::call;
  request_head head;
  std::string method;
  std::string type;  ///< workflow type, may be empty
  bytes args;        ///< JSON
  uint32_t park_ms = 0;
  bool operator==(const call&) const = default;
};

struct call_reply {
  static constexpr kind tag = kind::call_reply;
  request_head head;
  uint64_t relay = 0;
  uint8_t ok = 0;
  bytes body;  ///< JSON
  bool operator==(const call_reply&) const = default;
};

struct relay {
  static constexpr kind tag = kind::relay;
  request_head head;
  shard_id target;
  uint64_t outbox_id = 0;
  bytes payload;
  bool operator==(const relay&) const = default;
};

struct message_ack {
  static constexpr kind tag = kind::message_ack;
  request_head head;
  shard_id from;
  epoch_t from_epoch;
  uint64_t outbox_id = 0;
  bool operator==(const message_ack&) const = default;
};

struct drain {
  static constexpr kind tag = kind::drain;
  request_head head;
  std::vector<shard_id> shards;
  bool operator==(const drain&) const = default;
};

struct idle {
  static constexpr kind tag = kind::idle;
  request_head head;
  std::vector<idle_entry> entries;
  bool operator==(const idle&) const = default;
};

struct release {
  static constexpr kind tag = kind::release;
  request_head head;
  bool operator==(const release&) const = default;
};

/// Extension (tokens): the first frame on a server that has tokens. `nonce` is the client's
/// fresh nonce (32 bytes).
struct auth_hello {
  static constexpr kind tag = kind::auth;
  request_head head;
  uint32_t version = 1;  ///< of the token extension
  bytes nonce;
  bool operator==(const auth_hello&) const = default;
};

/// Extension (tokens): the client's proof of its token over both nonces (protocol/auth.hpp).
struct auth_response {
  static constexpr kind tag = kind::auth_proof;
  request_head head;
  bytes proof;
  bool operator==(const auth_response&) const = default;
};

// -- from the server --------------------------------------------------------------------------

/// OK: `payload` is request-specific (empty unless stated; 4 bytes shard_count for CLIENT_HELLO).
struct ok {
  static constexpr kind tag = kind::ok;
  uint64_t id = 0;
  bytes payload;  ///< the rest of the body, raw
  bool operator==(const ok&) const = default;
};

struct err {
  static constexpr kind tag = kind::err;
  uint64_t id = 0;
  uint16_t code =
      0;  ///< an err_code; unknown nonzero values are accepted for forward compatibility
  std::string message;
  bool operator==(const err&) const = default;
};

struct lease {
  static constexpr kind tag = kind::lease;
  uint64_t id = 0;
  uint32_t shard_count = 0;
  uint32_t ping_interval_ms = 0;
  uint32_t timeout_ms = 0;
  uint32_t remaining_ms = 0;  ///< 0 unless invoked
  std::vector<grant_entry> grants;
  bool operator==(const lease&) const = default;
};

/// The most shards a node may have: a LEASE granting every one of them (28 bytes, then 20 per
/// grant) still fits one frame (PROTOCOL.md §2: len ≤ 96 MiB). The largest GRANT, REVOKED and
/// DURABLE are no longer than that LEASE.
inline constexpr uint32_t max_shard_count = (max_body_size - 28) / 20;

/// The most shards one invocation may hold on a node whose frames are at most `frame_mb` MiB
/// (limits.max_frame_mb): its worker's IDLE lists them all in one frame, at most 48 bytes each
/// before the workflow types it had no code for; 10,000 per MiB leave each about 56 bytes for
/// those, and the worker leaves out types that do not fit (worker::fit_idle_types).
constexpr uint32_t max_invocation_shards(uint32_t frame_mb) {
  return frame_mb * 10'000;
}
/// The frame bytes each shard of an invocation can count on (104), at any `limits.max_frame_mb`.
inline constexpr uint32_t idle_bytes_per_shard = (1u << 20) / max_invocation_shards(1);
static_assert(uint64_t{max_invocation_shards(96)} * 100 < max_body_size);

struct grant {
  static constexpr kind tag = kind::grant;
  uint64_t id = 0;
  std::vector<grant_entry> grants;
  bool operator==(const grant&) const = default;
};

struct durable {
  static constexpr kind tag = kind::durable;
  uint64_t id = 0;
  std::vector<position> positions;
  bool operator==(const durable&) const = default;
};

struct log_page {
  static constexpr kind tag = kind::log_page;
  uint64_t id = 0;
  shard_id shard;
  lsn_t first_lsn;
  std::vector<bytes> records;
  uint8_t more = 0;
  lsn_t durable_lsn;
  bool operator==(const log_page&) const = default;
};

struct checkpoint_data {
  static constexpr kind tag = kind::checkpoint_data;
  uint64_t id = 0;
  lsn_t lsn;
  bytes data;
  bool operator==(const checkpoint_data&) const = default;
};

struct relayed_call {
  static constexpr kind tag = kind::relayed_call;
  uint64_t id = 0;
  uint64_t relay = 0;
  shard_id shard;
  std::string method;
  std::string type;
  bytes args;
  bool operator==(const relayed_call&) const = default;
};

struct call_result {
  static constexpr kind tag = kind::call_result;
  uint64_t id = 0;
  uint8_t status = 0;  ///< a call_status
  bytes body;
  bool operator==(const call_result&) const = default;
};

struct message {
  static constexpr kind tag = kind::message;
  uint64_t id = 0;
  shard_id target;
  shard_id from;
  epoch_t from_epoch;
  uint64_t outbox_id = 0;
  bytes payload;
  bool operator==(const message&) const = default;
};

struct ack {
  static constexpr kind tag = kind::ack;
  uint64_t id = 0;
  shard_id from;
  epoch_t from_epoch;
  uint64_t outbox_id = 0;
  bool operator==(const ack&) const = default;
};

struct revoked {
  static constexpr kind tag = kind::revoked;
  uint64_t id = 0;
  std::vector<shard_epoch> shards;
  std::string reason;
  bool operator==(const revoked&) const = default;
};

struct io_failed {
  static constexpr kind tag = kind::io_failed;
  uint64_t id = 0;
  shard_id shard;
  epoch_t epoch;
  std::string message;
  bool operator==(const io_failed&) const = default;
};

/// Extension: the cluster's shard map, sent before the LEASE to a HELLO that offered
/// CLUSTER_MAP. No nodes (and an empty digest): the server is a cluster of one and serves every
/// shard on this connection.
struct cluster_map_frame {
  static constexpr kind tag = kind::cluster_map;
  uint64_t id = 0;
  std::string digest;  ///< the map's SHA-256, as the nodes compare it
  std::string node;    ///< the node that answered
  std::vector<map_node> nodes;
  bool operator==(const cluster_map_frame&) const = default;
};

/// Extension (tokens): answers AUTH with the server's fresh nonce (32 bytes).
struct auth_challenge {
  static constexpr kind tag = kind::auth_challenge;
  uint64_t id = 0;
  bytes nonce;
  bool operator==(const auth_challenge&) const = default;
};

/// Extension (tokens): answers AUTH_PROOF when a token matched: its scope (1 read, 2 client,
/// 3 worker), its name, and the server's proof that it knows the same secret.
struct auth_ok {
  static constexpr kind tag = kind::auth_ok;
  uint64_t id = 0;
  uint8_t scope = 0;
  std::string token;
  bytes proof;
  bool operator==(const auth_ok&) const = default;
};

using any_message =
    std::variant<hello, append, recover_log, checkpoint, load_checkpoint, ping, client_hello, call,
                 call_reply, relay, message_ack, drain, idle, release, ok, err, lease, grant,
                 durable, log_page, checkpoint_data, relayed_call, call_result, message, ack,
                 revoked, io_failed, cluster_map_frame, auth_hello, auth_response, auth_challenge,
                 auth_ok>;

kind kind_of(const any_message& m);

/// Appends the body (no frame header) of `m` to `out`.
void encode_body(const any_message& m, bytes& out);
/// Appends the whole frame of `m` to `out`.
void append_frame(bytes& out, const any_message& m);
bytes encode(const any_message& m);

/// Decodes and validates a body of any defined kind. Never reads past `body`; any input that is
/// not a valid message of that kind yields an error naming the field.
result<any_message> decode(uint8_t kind, byte_view body);
/// As decode(), for a server: kinds that are not requests are ERR UNKNOWN_KIND.
result<any_message> decode_request(uint8_t kind, byte_view body);
/// As decode(), for a worker or client: kinds that are not from the server are ERR UNKNOWN_KIND.
result<any_message> decode_response(uint8_t kind, byte_view body);
/// An APPEND's body as views into `body`, with the errors decode() gives for it.
result<append_view> decode_append_view(byte_view body);
/// Decodes a frame's body.
inline result<any_message> decode(const frame& f) {
  return decode(f.kind, f.body);
}

/// The rules a decoded message must keep beyond its layout (versions, offers, flag bits, ranges,
/// shard-less heads). decode() applies it; senders may call it before encoding.
std::optional<error> validate(const any_message& m);

/// The OK that answers CLIENT_HELLO.
ok make_client_hello_ok(uint64_t id, uint32_t shard_count);
/// Reads shard_count from the OK that answered CLIENT_HELLO.
std::optional<uint32_t> client_hello_shard_count(const ok& m);

/// The CLUSTER_MAP answering HELLO `id` on node `node` of `map` (no map: a cluster of one).
cluster_map_frame make_cluster_map_frame(uint64_t id, const cluster_map* map,
                                         const std::string& node);

/// A CALL_RESULT with status `status` (2-4) and the body {"error": message}.
call_result call_error(uint64_t id, call_status status, const std::string& message);

/// An ERR frame's struct.
inline err make_err(uint64_t id, const error& e) {
  return err{id, static_cast<uint16_t>(e.code), e.message};
}

}  // namespace fusee::proto
