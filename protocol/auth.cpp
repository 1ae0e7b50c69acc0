#include "protocol/auth.hpp"

#include <cstdio>
#include <cstdlib>

#include <openssl/crypto.h>
#include <openssl/rand.h>

namespace fusee::proto {

std::string_view scope_name(scope s) {
  switch (s) {
  case scope::read:
    return "read";
  case scope::client:
    return "client";
  case scope::worker:
    return "worker";
  }
  return "unknown";
}

std::optional<scope> parse_scope(std::string_view text) {
  for (auto s : {scope::read, scope::client, scope::worker})
    if (text == scope_name(s)) return s;
  return std::nullopt;
}

std::optional<scope> scope_of_byte(uint8_t b) {
  if (b < 1 || b > 3) return std::nullopt;
  return static_cast<scope>(b);
}

bool is_read_method(std::string_view method) {
  return method == "result" || method == "describe";
}

scope scope_needed(const any_message& request) {
  return std::visit(
      [](const auto& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, client_hello> || std::is_same_v<T, ping> ||
                      std::is_same_v<T, auth_hello> || std::is_same_v<T, auth_response>)
          return scope::read;
        else if constexpr (std::is_same_v<T, call>)
          return is_read_method(m.method) ? scope::read : scope::client;
        else
          return scope::worker;  // HELLO and everything a shard's holder sends
      },
      request);
}

bytes fresh_nonce() {
  bytes n(auth_nonce_size);
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    std::fprintf(stderr, "fusee: OpenSSL RAND_bytes failed: no randomness for a nonce\n");
    std::abort();
  }
  return n;
}

sha256_digest auth_proof(std::string_view secret, auth_side side, byte_view client_nonce,
                         byte_view server_nonce, byte_view binding) {
  static constexpr std::string_view client_label{"fusee-auth-v1 client\0", 21};
  static constexpr std::string_view server_label{"fusee-auth-v1 server\0", 21};
  auto label = side == auth_side::client ? client_label : server_label;
  return hmac_sha256(as_bytes(secret), {as_bytes(label), client_nonce, server_nonce, binding});
}

void wipe(std::string& s) {
  if (!s.empty()) OPENSSL_cleanse(s.data(), s.size());
}

bool same_bytes(byte_view a, byte_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

const token* token_for_proof(const std::vector<token>& tokens, byte_view proof,
                             byte_view client_nonce, byte_view server_nonce, byte_view binding) {
  const token* found = nullptr;
  for (auto& t : tokens) {
    auto expected = auth_proof(t.secret, auth_side::client, client_nonce, server_nonce, binding);
    if (same_bytes(expected, proof) && found == nullptr) found = &t;
  }
  return found;
}

const token* token_for_secret(const std::vector<token>& tokens, std::string_view presented) {
  // Both sides through one keyed hash: equal digests, equal secrets; the time does not depend
  // on the lengths or on where they differ.
  static const bytes key = fresh_nonce();
  auto given = hmac_sha256(key, as_bytes(presented));
  const token* found = nullptr;
  for (auto& t : tokens)
    if (same_bytes(hmac_sha256(key, as_bytes(t.secret)), given) && found == nullptr) found = &t;
  return found;
}

}  // namespace fusee::proto
