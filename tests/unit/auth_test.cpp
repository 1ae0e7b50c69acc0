#include <doctest/doctest.h>

#include "protocol/auth.hpp"

using namespace fusee::proto;

namespace {
bytes n(uint8_t fill) {
  return bytes(auth_nonce_size, fill);
}
}  // namespace

TEST_CASE("a token proof depends on the side, both nonces, the binding and the secret") {
  auto base = auth_proof("secret-0123456789", auth_side::client, n(1), n(2), {});
  CHECK(base == auth_proof("secret-0123456789", auth_side::client, n(1), n(2), {}));
  CHECK(base != auth_proof("secret-0123456789", auth_side::server, n(1), n(2), {}));
  CHECK(base != auth_proof("secret-0123456789", auth_side::client, n(3), n(2), {}));
  CHECK(base != auth_proof("secret-0123456789", auth_side::client, n(1), n(3), {}));
  CHECK(base != auth_proof("secret-0123456789", auth_side::client, n(1), n(2), n(9)));
  CHECK(base != auth_proof("secret-0123456780", auth_side::client, n(1), n(2), {}));
  // The layout is fixed (docs/protocol.md): HMAC over label, zero byte, nonces, binding.
  std::string label = std::string("fusee-auth-v1 client") + '\0';
  bytes msg(label.begin(), label.end());
  msg.insert(msg.end(), 32, 1);
  msg.insert(msg.end(), 32, 2);
  CHECK(base == hmac_sha256(as_bytes("secret-0123456789"), msg));
}

TEST_CASE("fresh nonces are 32 bytes and differ") {
  auto a = fresh_nonce();
  CHECK(a.size() == 32);
  CHECK(a != fresh_nonce());
}

TEST_CASE("the token matching a proof or a bearer secret is found, none for strangers") {
  std::vector<token> tokens{{"w", scope::worker, "worker-secret-0123456789"},
                            {"r", scope::read, "read-secret-0123456789"}};
  auto proof = auth_proof("read-secret-0123456789", auth_side::client, n(1), n(2), {});
  auto* t = token_for_proof(tokens, proof, n(1), n(2), {});
  REQUIRE(t != nullptr);
  CHECK(t->name == "r");
  CHECK(token_for_proof(tokens, proof, n(1), n(3), {}) == nullptr);
  CHECK(token_for_proof(tokens, proof, n(1), n(2), n(4)) == nullptr);
  CHECK(token_for_secret(tokens, "worker-secret-0123456789")->name == "w");
  CHECK(token_for_secret(tokens, "worker-secret-012345678") == nullptr);
  CHECK(token_for_secret(tokens, "") == nullptr);
}

TEST_CASE("each request needs its scope: HELLO a worker, start a client, describe a reader") {
  auto call_of = [](const char* method) {
    call c;
    c.method = method;
    return any_message{c};
  };
  CHECK(scope_needed(hello{}) == scope::worker);
  CHECK(scope_needed(append{}) == scope::worker);
  CHECK(scope_needed(relay{}) == scope::worker);
  CHECK(scope_needed(call_of("start")) == scope::client);
  CHECK(scope_needed(call_of("cancel")) == scope::client);
  CHECK(scope_needed(call_of("result")) == scope::read);
  CHECK(scope_needed(call_of("describe")) == scope::read);
  CHECK(scope_needed(client_hello{}) == scope::read);
  CHECK(scope_needed(ping{}) == scope::read);
  CHECK(parse_scope("client") == scope::client);
  CHECK_FALSE(parse_scope("admin"));
  CHECK_FALSE(scope_of_byte(0));
  CHECK_FALSE(scope_of_byte(4));
}
