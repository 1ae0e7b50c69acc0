#include "protocol/signature.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include "protocol/hex.hpp"

namespace fusee::proto {

namespace {

struct mac_ctx_deleter {
  void operator()(EVP_MAC_CTX* c) const { EVP_MAC_CTX_free(c); }
};

[[noreturn]] void crypto_failure(const char* what) {
  // The only causes are allocation failure or a broken OpenSSL install: nothing sensible to do.
  std::fprintf(stderr, "fusee: OpenSSL %s failed\n", what);
  std::abort();
}

}  // namespace

sha256_digest hmac_sha256(byte_view key, std::initializer_list<byte_view> parts) {
  static EVP_MAC* mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (mac == nullptr) crypto_failure("EVP_MAC_fetch(HMAC)");
  std::unique_ptr<EVP_MAC_CTX, mac_ctx_deleter> ctx{EVP_MAC_CTX_new(mac)};
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                         OSSL_PARAM_construct_end()};
  // EVP_MAC_init refuses a null key pointer even for an empty key.
  static const uint8_t empty = 0;
  const uint8_t* key_ptr = key.empty() ? &empty : key.data();
  if (!ctx || EVP_MAC_init(ctx.get(), key_ptr, key.size(), params) != 1)
    crypto_failure("EVP_MAC_init");
  for (auto part : parts)
    if (!part.empty() && EVP_MAC_update(ctx.get(), part.data(), part.size()) != 1)
      crypto_failure("EVP_MAC_update");
  sha256_digest out{};
  size_t len = 0;
  if (EVP_MAC_final(ctx.get(), out.data(), &len, out.size()) != 1 || len != out.size())
    crypto_failure("EVP_MAC_final");
  return out;
}

namespace {

sha256_digest sign_digest(std::string_view secret, std::string_view t, std::string_view body) {
  static const uint8_t dot = '.';
  return hmac_sha256(as_bytes(secret), {as_bytes(t), byte_view{&dot, 1}, as_bytes(body)});
}

std::optional<uint64_t> parse_decimal(std::string_view s) {
  if (s.empty() || s.size() > 20) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

std::optional<sha256_digest> parse_digest(std::string_view s) {
  if (s.size() != 64) return std::nullopt;
  sha256_digest out{};
  for (size_t i = 0; i < 32; ++i) {
    int hi = hex_digit(s[2 * i]);
    int lo = hex_digit(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return out;
}

signature_failure failure(signature_error e, std::string message) {
  return signature_failure{e, std::move(message)};
}

}  // namespace

sha256_digest hmac_sha256(byte_view key, byte_view data) {
  return hmac_sha256(key, std::initializer_list<byte_view>{data});
}

std::string sign(std::span<const std::string> secrets, uint64_t t_ms, std::string_view body) {
  auto t = std::to_string(t_ms);
  std::string out = "t=" + t;
  for (const auto& secret : secrets) {
    auto d = sign_digest(secret, t, body);
    out += ",v1=";
    out += to_hex(d.data(), d.size());
  }
  return out;
}

std::string sign(std::string_view secret, uint64_t t_ms, std::string_view body) {
  std::string s{secret};
  return sign(std::span<const std::string>{&s, 1}, t_ms, body);
}

namespace {

/// A header's parts, once it is well formed and its t within the tolerance.
struct header_parts {
  std::string_view t_text;
  std::vector<sha256_digest> given;
};

std::optional<signature_failure> parse_header(std::string_view header, uint64_t now_ms,
                                              uint64_t tolerance_ms, header_parts& out) {
  std::optional<std::string_view> t_text;
  size_t start = 0;
  while (start <= header.size()) {
    size_t comma = header.find(',', start);
    if (comma == std::string_view::npos) comma = header.size();
    auto part = header.substr(start, comma - start);
    start = comma + 1;
    auto eq = part.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return failure(signature_error::malformed, "signature entry \"" +
                                                     std::string{part.substr(0, 80)} +
                                                     "\" is not key=value");
    auto key = part.substr(0, eq);
    auto value = part.substr(eq + 1);
    if (key == "t") {
      if (t_text) return failure(signature_error::malformed, "signature has more than one t=");
      t_text = value;
    } else if (key == "v1") {
      auto d = parse_digest(value);
      if (!d) return failure(signature_error::malformed, "v1= must be 64 lowercase hex digits");
      out.given.push_back(*d);
    }
  }
  if (!t_text) return failure(signature_error::malformed, "signature has no t=");
  auto t = parse_decimal(*t_text);
  if (!t)
    return failure(signature_error::malformed, "t= must be a decimal Unix time in milliseconds");
  if (out.given.empty()) return failure(signature_error::malformed, "signature has no v1=");
  if (*t < now_ms && now_ms - *t > tolerance_ms)
    return failure(signature_error::too_old, "signature is " + std::to_string(now_ms - *t) +
                                                 " ms old; the tolerance is " +
                                                 std::to_string(tolerance_ms) + " ms");
  if (*t > now_ms && *t - now_ms > tolerance_ms)
    return failure(signature_error::too_new, "signature is " + std::to_string(*t - now_ms) +
                                                 " ms in the future; the tolerance is " +
                                                 std::to_string(tolerance_ms) + " ms");
  out.t_text = *t_text;
  return std::nullopt;
}

}  // namespace

std::optional<signature_failure> check_header(std::string_view header, uint64_t now_ms,
                                              uint64_t tolerance_ms) {
  header_parts parts;
  return parse_header(header, now_ms, tolerance_ms, parts);
}

std::optional<signature_failure> verify(std::string_view header, std::string_view body,
                                        std::span<const std::string> secrets, uint64_t now_ms,
                                        uint64_t tolerance_ms) {
  header_parts parts;
  if (auto bad = parse_header(header, now_ms, tolerance_ms, parts)) return bad;
  bool match = false;
  for (const auto& secret : secrets) {
    auto want = sign_digest(secret, parts.t_text, body);
    for (const auto& d : parts.given)
      match |= CRYPTO_memcmp(want.data(), d.data(), want.size()) == 0;
  }
  if (!match)
    return failure(signature_error::mismatch, "signature does not match the body and secret");
  return std::nullopt;
}

}  // namespace fusee::proto
