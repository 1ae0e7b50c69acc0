// Tokens, their scopes and the challenge–response that proves one on a connection
// (docs/protocol.md, "Extension: tokens"). Pure: no sockets, no files, no clocks.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"
#include "protocol/signature.hpp"

namespace fusee::proto {

/// What a token may do. Each scope includes the ones below it.
enum class scope : uint8_t {
  read = 1,    ///< describe and result calls, metrics, introspection
  client = 2,  ///< any call (start, signal, cancel, ...); holds no shard
  worker = 3,  ///< holds shards (HELLO), relays, any call
};

/// "read", "client", "worker".
std::string_view scope_name(scope s);
std::optional<scope> parse_scope(std::string_view text);
/// A scope byte from the wire (AUTH_OK), if it is one.
std::optional<scope> scope_of_byte(uint8_t b);

/// The scope a request needs (AUTH and AUTH_PROOF need none: they prove one).
scope scope_needed(const any_message& request);
/// The CALL methods a read token may use.
bool is_read_method(std::string_view method);

inline constexpr size_t auth_nonce_size = 32;
/// A fresh nonce from OpenSSL's generator (aborts if it has no entropy: nothing else is safe).
bytes fresh_nonce();

/// The HMAC-SHA256 each side sends to prove it knows `secret`: over the ASCII label
/// "fusee-auth-v1 client" or "fusee-auth-v1 server", a zero byte, the client's nonce, the
/// server's nonce and `binding` (the TLS exporter value, empty without TLS). Neither side's
/// proof can stand for the other's, and a proof is worth nothing on another connection.
enum class auth_side : uint8_t { client, server };
sha256_digest auth_proof(std::string_view secret, auth_side side, byte_view client_nonce,
                         byte_view server_nonce, byte_view binding);

/// Overwrites `s`'s bytes (a secret no longer needed) in a way the compiler keeps.
void wipe(std::string& s);

/// Equal lengths and bytes, in time independent of where they differ.
bool same_bytes(byte_view a, byte_view b);

/// A token the server accepts: its name (for logs and metrics; never the secret), scope and
/// secret.
struct token {
  std::string name;
  proto::scope scope = scope::read;
  std::string secret;
  ~token() { wipe(secret); }
};

/// The token whose client proof is `proof`, if any. Every token is tried (no early exit).
const token* token_for_proof(const std::vector<token>& tokens, byte_view proof,
                             byte_view client_nonce, byte_view server_nonce, byte_view binding);
/// The token whose secret is `presented` (an HTTP bearer token), if any; compared in constant
/// time whatever the lengths.
const token* token_for_secret(const std::vector<token>& tokens, std::string_view presented);

}  // namespace fusee::proto
