// Tokens (docs/protocol.md, "Extension: tokens"): the challenge–response on the worker listener,
// scopes, SIGHUP reloads, bearer tokens on the HTTP API and the admin server.
#include <doctest/doctest.h>

#include <csignal>
#include <fstream>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/security.hpp"
#include "raw_socket.hpp"
#include "server_process.hpp"
#include "worker_process.hpp"

using namespace fusee;
using namespace std::chrono_literals;
using proto::err_code;

namespace {

const std::string worker_secret = "w-0123456789abcdef0123456789abcdef";
const std::string client_secret = "c-0123456789abcdef0123456789abcdef";
const std::string read_secret = "r-0123456789abcdef0123456789abcdef";

void write_file(const std::filesystem::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::trunc);
  out << text << "\n";
}

/// A node with one token of each scope, in files under the data dir's parent.
struct fixture {
  test::temp_dir dir;
  std::filesystem::path files = dir.path() / "tokens";
  test::server_process server;

  static std::string tokens_toml(const std::filesystem::path& files) {
    std::filesystem::create_directories(files);
    write_file(files / "worker.token", worker_secret);
    write_file(files / "client.token", client_secret);
    write_file(files / "read.token", read_secret);
    std::string toml;
    for (auto [name, scope] :
         {std::pair{"workers", "worker"}, std::pair{"ci", "client"}, std::pair{"grafana", "read"}})
      toml += std::string("[[token]]\nname = \"") + name + "\"\nscope = \"" + scope +
              "\"\nfile = \"" + (files / (std::string(scope) + ".token")).string() + "\"\n";
    return toml;
  }

  fixture()
      : server(dir.path() / "data",
               "[server]\nshards = 4\n[invoker]\npark_ms = 1000\n" + tokens_toml(files)) {
    auto err = server.start();
    REQUIRE_MESSAGE(err.empty(), err);
  }

  /// A connection that proved `secret`.
  client::connection proven(const std::string& secret, proto::scope expected) {
    auto c = server.connect();
    auto r = client::authenticate(c, secret, 5s);
    REQUIRE_MESSAGE(r, (r ? "" : r.err().to_string()));
    CHECK(r->scope == expected);
    return c;
  }
};

proto::err expect_err(client::connection& c) {
  auto r = c.receive(5s);
  REQUIRE_MESSAGE(r, (r ? "" : r.err().to_string()));
  auto* e = std::get_if<proto::err>(&*r);
  REQUIRE_MESSAGE(e != nullptr, "got " << proto::kind_name(uint8_t(proto::kind_of(*r))));
  return *e;
}

bool closed_by_server(client::connection& c) {
  auto r = c.receive(5s);
  return !r && c.closed();
}

proto::call call_of(uint64_t id, const std::string& method, uint32_t park_ms = 100) {
  std::string args = R"({"id":"w1","type":"steps","input":null})";
  return proto::call{proto::request_head{id, proto::shard_id{0}, proto::epoch_t{0}}, method,
                     "steps", proto::bytes(args.begin(), args.end()), park_ms};
}

std::string bearer(const std::string& secret) {
  return "Authorization: Bearer " + secret;
}

/// What the server at 127.0.0.1:`port` answers within 5 s to a request's head alone: its body is
/// announced (`head` says Content-Length) and never sent. "" if nothing came.
std::string answer_to_head(uint16_t port, const std::string& head) {
  test::raw_socket s(port, head);
  return s.http_answer(5s);
}

}  // namespace

TEST_CASE("a server with tokens refuses a connection that proves none, and counts it") {
  fixture f;
  auto c = f.server.connect();
  c.send(proto::client_hello{proto::request_head{1}, 1, "anonymous"});
  auto e = expect_err(c);
  CHECK(e.code == uint16_t(err_code::unauthorized));
  CHECK(e.message.find("requires a token") != std::string::npos);
  CHECK(closed_by_server(c));
  auto [status, body] =
      test::http_request("GET", f.server.admin_port(), "/metrics", "", 5000, {bearer(read_secret)});
  CHECK(status == 200);
  CHECK(body.find("fusee_auth_refused_total 1\n") != std::string::npos);
  CHECK(body.find("fusee_auth_tokens 3\n") != std::string::npos);
  CHECK(f.server.log().find(client_secret) == std::string::npos);
}

TEST_CASE("before a token is proven a frame is refused undecoded, and may be 64 KiB at most") {
  fixture f;
  {
    // A HELLO whose body would not even decode: refused for the token, not for the body (the
    // server does not decode what a peer that proved nothing sends).
    auto c = f.server.connect();
    proto::bytes body{7, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};  // id 7, then garbage
    REQUIRE(c.send_raw(proto::encode_frame(uint8_t(proto::kind::hello), body)));
    auto e = expect_err(c);
    CHECK(e.id == 7);
    CHECK(e.code == uint16_t(err_code::unauthorized));
    CHECK(e.message.find("prove one with AUTH before HELLO") != std::string::npos);
    CHECK(closed_by_server(c));
  }
  {
    // One byte over 64 KiB before AUTH: too large, whatever limits.max_frame_mb allows.
    auto c = f.server.connect();
    proto::bytes body((64 << 10) + 1, 0);
    body[0] = 8;
    REQUIRE(c.send_raw(proto::encode_frame(uint8_t(proto::kind::client_hello), body)));
    auto e = expect_err(c);
    CHECK(e.code == uint16_t(err_code::too_large));
    CHECK(e.message.find("before a token is proven") != std::string::npos);
    CHECK(closed_by_server(c));
  }
  // Once proven, the frame limit is limits.max_frame_mb again: a CALL of 100 KiB is answered.
  auto c = f.proven(client_secret, proto::scope::client);
  REQUIRE(client::client_hello(c, "big", 5s));
  std::string args = R"({"id":")" + std::string(100 << 10, 'x') + R"("})";
  c.send(proto::call{proto::request_head{9, proto::shard_id{0}, proto::epoch_t{0}}, "describe",
                     "steps", proto::bytes(args.begin(), args.end()), 100});
  auto r = c.receive(5s);
  REQUIRE_MESSAGE(r, (r ? "" : r.err().to_string()));
  auto* res = std::get_if<proto::call_result>(&*r);
  REQUIRE_MESSAGE(res != nullptr, "got " << proto::kind_name(uint8_t(proto::kind_of(*r))));
  CHECK(res->id == 9);
}

TEST_CASE("a fusee worker whose token may not hold shards, or whose server address is not "
          "host:port, stops with exit 2 saying why instead of retrying for ever") {
  fixture f;
  auto addr = "127.0.0.1:" + std::to_string(f.server.port());
  auto [rc, out] = test::run_process({test::fusee_binary(), "worker", "--server", addr, "--name",
                                      "w", "--token-file", (f.files / "client.token").string()},
                                     f.dir.path() / "worker-ci.log", 20s);
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("the server refused this worker: UNAUTHORIZED: token \"ci\" has the "
                         "client scope: HELLO needs a worker token") != std::string::npos,
                out);
  auto [rc2, out2] =
      test::run_process({test::fusee_binary(), "worker", "--server", "127.0.0.1", "--name", "w"},
                        f.dir.path() / "worker-addr.log", 20s);
  CHECK(rc2 == 2);
  CHECK_MESSAGE(out2.find("w: the server address 127.0.0.1 is not host:port") != std::string::npos,
                out2);
}

TEST_CASE("a client-scoped token cannot HELLO as a worker, a worker token can") {
  fixture f;
  auto c = f.proven(client_secret, proto::scope::client);
  client::send_hello(c, proto::offer_serve_calls, 0, "pretender");
  auto e = expect_err(c);
  CHECK(e.code == uint16_t(err_code::unauthorized));
  CHECK(e.message == "token \"ci\" has the client scope: HELLO needs a worker token");
  // Refused, not closed: the connection may still be a client.
  auto n = client::client_hello(c, "cli", 5s);
  REQUIRE(n);
  CHECK(*n == 4);
  auto w = f.proven(worker_secret, proto::scope::worker);
  auto lease = client::hello(w, proto::offer_serve_calls, 0, "worker", 5s);
  REQUIRE(lease);
  CHECK(lease->grants.size() == 4);
}

TEST_CASE("a read token cannot start a workflow but may describe one") {
  fixture f;
  auto c = f.proven(read_secret, proto::scope::read);
  REQUIRE(client::client_hello(c, "reader", 5s));
  c.send(call_of(5, "start"));
  auto e = expect_err(c);
  CHECK(e.id == 5);
  CHECK(e.code == uint16_t(err_code::unauthorized));
  CHECK(e.message == "token \"grafana\" has the read scope: a start CALL needs a client token");
  c.send(call_of(6, "describe"));  // allowed: no holder, so parked, then status 2
  auto r = c.receive(5s);
  REQUIRE(r);
  auto* res = std::get_if<proto::call_result>(&*r);
  REQUIRE(res != nullptr);
  CHECK(res->id == 6);
  CHECK(res->status == uint8_t(proto::call_status::parked_too_long));
}

TEST_CASE("a replayed proof and a proof over a tampered challenge are refused") {
  fixture f;
  auto nonce = proto::fresh_nonce();
  proto::bytes proof;
  {  // a connection proves the client token; the proof is recorded
    auto c = f.server.connect();
    c.send(proto::auth_hello{proto::request_head{1}, 1, nonce});
    auto r = c.receive(5s);
    REQUIRE(r);
    auto* ch = std::get_if<proto::auth_challenge>(&*r);
    REQUIRE(ch != nullptr);
    auto d = proto::auth_proof(client_secret, proto::auth_side::client, nonce, ch->nonce, {});
    proof.assign(d.begin(), d.end());
    c.send(proto::auth_response{proto::request_head{2}, proof});
    auto ok = c.receive(5s);
    REQUIRE(ok);
    CHECK(std::holds_alternative<proto::auth_ok>(*ok));
  }
  {  // the same nonce and proof on a new connection: the server's nonce is new
    auto c = f.server.connect();
    c.send(proto::auth_hello{proto::request_head{1}, 1, nonce});
    auto r = c.receive(5s);
    REQUIRE(r);
    REQUIRE(std::holds_alternative<proto::auth_challenge>(*r));
    c.send(proto::auth_response{proto::request_head{2}, proof});
    auto e = expect_err(c);
    CHECK(e.code == uint16_t(err_code::unauthorized));
    CHECK(e.message.find("matches none of this server's tokens") != std::string::npos);
    CHECK(closed_by_server(c));
  }
  {  // a proof over a challenge changed on the way
    auto c = f.server.connect();
    c.send(proto::auth_hello{proto::request_head{1}, 1, nonce});
    auto r = c.receive(5s);
    REQUIRE(r);
    auto tampered = std::get<proto::auth_challenge>(*r).nonce;
    tampered[0] ^= 1;
    auto d = proto::auth_proof(client_secret, proto::auth_side::client, nonce, tampered, {});
    c.send(proto::auth_response{proto::request_head{2}, proto::bytes(d.begin(), d.end())});
    CHECK(expect_err(c).code == uint16_t(err_code::unauthorized));
  }
  CHECK(f.server.log().find(client_secret) == std::string::npos);
}

TEST_CASE("a client refuses a server whose proof does not match its token") {
  // A stand-in server that knows no token: it answers with a proof made from another secret.
  int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(::listen(lfd, 1) == 0);
  socklen_t len = sizeof(addr);
  ::getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::thread impostor([lfd] {
    int fd = ::accept(lfd, nullptr, nullptr);
    proto::frame_decoder dec;
    auto next = [&]() -> std::optional<proto::any_message> {
      for (;;) {
        auto f = dec.next();
        if (f && *f) {
          auto m = proto::decode_request((*f)->kind, (*f)->body);
          return m ? std::optional{std::move(*m)} : std::nullopt;
        }
        uint8_t buf[4096];
        auto n = ::recv(fd, buf, sizeof(buf), 0);
        if (n <= 0) return std::nullopt;
        dec.feed(buf, size_t(n));
      }
    };
    auto send = [&](const proto::any_message& m) {
      auto b = proto::encode(m);
      (void)!::send(fd, b.data(), b.size(), MSG_NOSIGNAL);
    };
    auto hello = next();
    auto server_nonce = proto::fresh_nonce();
    if (hello) send(proto::auth_challenge{1, server_nonce});
    auto proof = next();
    if (proof) {
      auto& a = std::get<proto::auth_hello>(*hello);
      auto d = proto::auth_proof("not-the-client-token-0123456789", proto::auth_side::server,
                                 a.nonce, server_nonce, {});
      send(proto::auth_ok{2, 3, "workers", proto::bytes(d.begin(), d.end())});
    }
    ::close(fd);
  });
  auto c = client::connection::open("127.0.0.1", ntohs(addr.sin_port));
  REQUIRE(c);
  auto r = client::authenticate(*c, client_secret, 5s);
  impostor.join();
  ::close(lfd);
  REQUIRE(!r);
  CHECK(r.err().code == err_code::unauthorized);
  CHECK(r.err().message.find("the server's proof does not match this token") != std::string::npos);
}

TEST_CASE("SIGHUP rereads the token files and connections already proven keep working") {
  fixture f;
  auto old = f.proven(client_secret, proto::scope::client);
  REQUIRE(client::client_hello(old, "old", 5s));
  const std::string rotated = "c-rotated-fedcba9876543210fedcba98";
  write_file(f.files / "client.token", rotated);
  ::kill(f.server.pid(), SIGHUP);
  // The reload is done once the new secret is accepted (each attempt is a new connection).
  bool accepted = false;
  for (int i = 0; i < 100 && !accepted; ++i) {
    auto c = f.server.connect();
    accepted = bool(client::authenticate(c, rotated, 5s));
    if (!accepted) std::this_thread::sleep_for(20ms);
  }
  REQUIRE(accepted);
  auto c = f.server.connect();
  auto r = client::authenticate(c, client_secret, 5s);
  REQUIRE(!r);
  CHECK(r.err().code == err_code::unauthorized);
  old.send(proto::ping{proto::request_head{9}});
  auto pong = old.receive(5s);
  REQUIRE(pong);
  CHECK(std::get<proto::ok>(*pong).id == 9);
  CHECK(f.server.log().find("token files reloaded tokens=3") != std::string::npos);
  // A reload that fails (an empty file) keeps the tokens in use.
  write_file(f.files / "read.token", "");
  ::kill(f.server.pid(), SIGHUP);
  for (int i = 0; i < 100 && f.server.log().find("were not reloaded") == std::string::npos; ++i)
    std::this_thread::sleep_for(20ms);
  CHECK(f.server.log().find("token file " + (f.files / "read.token").string() + " is empty") !=
        std::string::npos);
  auto still = f.server.connect();
  CHECK(client::authenticate(still, read_secret, 5s));
}

TEST_CASE("a token file replaced in place is proven from a client's next connection on, and "
          "SIGHUP stops no worker") {
  fixture f;
  // A worker given SIGHUP (a reload, as everywhere) keeps its shards and stops on SIGTERM.
  test::worker_process w(f.server.port(), "w",
                         {"--token-file", (f.files / "worker.token").string()});
  REQUIRE(w.logged("holding 4 shard(s)"));
  ::kill(w.pid, SIGHUP);
  REQUIRE(w.logged("SIGHUP: the token file is read again at each connection"));
  CHECK(w.terminate() == 0);
  // A client's security, resolved once, reads its file again at each connection (the server's
  // and the client's file are one here).
  client::security_flags flags;
  flags.token_file = (f.files / "client.token").string();
  auto sec = client::resolve(flags);
  REQUIRE(sec);
  REQUIRE(client::connection::open("127.0.0.1", f.server.port(), *sec, 5s));
  const std::string rotated = "c-rotated-fedcba9876543210fedcba98";
  write_file(f.files / "client.token", rotated);
  ::kill(f.server.pid(), SIGHUP);
  bool accepted = false;  // once the server reloaded
  for (int i = 0; i < 500 && !accepted; ++i) {
    accepted = bool(client::connection::open("127.0.0.1", f.server.port(), *sec, 5s));
    if (!accepted) std::this_thread::sleep_for(20ms);
  }
  CHECK(accepted);
}

TEST_CASE("the HTTP API and the admin server take bearer tokens of the same scopes") {
  fixture f;
  auto api = f.server.http_port();
  auto admin = f.server.admin_port();
  auto [none, none_body] = test::http_request("GET", api, "/v1/workflows/w1", "", 5000);
  CHECK(none == 401);
  CHECK(none_body.find("Authorization: Bearer") != std::string::npos);
  CHECK(none_body.find("\"code\":\"unauthenticated\"") != std::string::npos);
  auto [wrong, wrong_body] = test::http_request("GET", api, "/v1/workflows/w1", "", 5000,
                                                {bearer("not-a-token-0123456789abcdef")});
  CHECK(wrong == 401);
  auto [read_post, read_post_body] = test::http_request("POST", api, "/v1/workflows/steps/w1",
                                                        "null", 5000, {bearer(read_secret)});
  CHECK(read_post == 403);
  CHECK(read_post_body.find("has the read scope") != std::string::npos);
  CHECK(read_post_body.find("\"code\":\"forbidden\"") != std::string::npos);
  // A client token is let through (no worker holds the shard: the call parks, then 503).
  auto [client_post, client_body] = test::http_request("POST", api, "/v1/workflows/steps/w1",
                                                       "null", 60000, {bearer(client_secret)});
  CHECK(client_post == 503);
  CHECK(client_body.find("\"code\":\"no_holder\"") != std::string::npos);
  CHECK(test::http_request("GET", admin, "/v1/overview", "", 5000).first == 401);
  CHECK(test::http_request("GET", admin, "/metrics", "", 5000).first == 401);
  CHECK(test::http_request("GET", admin, "/v1/overview", "", 5000, {bearer(read_secret)}).first ==
        200);
  // The scheme's name in any case (RFC 9110), the token as it is.
  CHECK(test::http_request("GET", admin, "/v1/overview", "", 5000,
                           {"Authorization: bEARER " + read_secret})
            .first == 200);
  // Refused before the body is read: without a token, a body announced and never sent is not
  // waited for; nor is one over the limit, token or not.
  auto no_token = answer_to_head(
      api, "POST /v1/workflows/steps/w1 HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
  CHECK(no_token.rfind("HTTP/1.1 401", 0) == 0);
  auto too_long =
      answer_to_head(api, "POST /v1/workflows/steps/w1 HTTP/1.1\r\nHost: x\r\n" +
                              bearer(client_secret) + "\r\nContent-Length: 100000000\r\n\r\n");
  CHECK(too_long.rfind("HTTP/1.1 413", 0) == 0);
  auto admin_post = answer_to_head(admin, "POST /metrics HTTP/1.1\r\nHost: x\r\n"
                                          "Content-Length: 1000000\r\n\r\n");
  CHECK(admin_post.rfind("HTTP/1.1 405", 0) == 0);
  // A web page of another site is refused whatever token its request carries.
  auto [page, page_body] =
      test::http_request("POST", api, "/v1/workflows/steps/w1", "null", 5000,
                         {bearer(client_secret), "Origin: https://evil.example"});
  CHECK(page == 403);
  CHECK(page_body.find("\"code\":\"cross_origin\"") != std::string::npos);
  // Probes and the dashboard's files need no token; the dashboard asks for one.
  CHECK(test::http_request("GET", admin, "/healthz", "", 5000).first == 200);
  CHECK(test::http_request("GET", admin, "/readyz", "", 5000).first == 200);
  CHECK(test::http_request("GET", admin, "/", "", 5000).first == 200);
  auto log = f.server.log();
  for (auto* secret : {&worker_secret, &client_secret, &read_secret})
    CHECK(log.find(*secret) == std::string::npos);
}

TEST_CASE("bad [[token]] tables are refused at start naming the token, never its secret") {
  test::temp_dir tmp;
  auto good = tmp.path() / "good.token";
  write_file(good, worker_secret);
  auto short_file = tmp.path() / "short.token";
  write_file(short_file, "tiny");
  auto table = [](const std::string& name, const std::string& scope,
                  const std::filesystem::path& file) {
    return "[[token]]\nname = \"" + name + "\"\nscope = \"" + scope + "\"\nfile = \"" +
           file.string() + "\"\n";
  };
  for (auto [toml, want] : std::vector<std::pair<std::string, std::string>>{
           {table("a", "admin", good),
            "[[token]] #1 (\"a\"): `token.scope` = \"admin\" is not one of worker, client, read"},
           {table("a", "worker", short_file),
            "holds fewer than 16 bytes; make one with `openssl rand -hex 32 > "},
           {table("a", "worker", tmp.path() / "missing"), "token file"},
           {table("a", "worker", good) + table("a", "read", good),
            "[[token]] #2 (\"a\"): another [[token]] has the same name"},
           {table("", "worker", good), "`token.name` is required"},
           {table("a", "worker", good) + "secret = \"x\"\n", "unknown key `token.secret`"}}) {
    test::server_process s(tmp.path() / "data", toml);
    auto err = s.start();
    CHECK_MESSAGE(err.find(want) != std::string::npos, err);
    CHECK(err.find(worker_secret) == std::string::npos);
  }
  // An inspector reachable from other hosts cannot check tokens: refused. (A name that begins
  // with "127." is a name, not a loopback address.)
  auto cfg = tmp.path() / "open-inspector.toml";
  write_file(cfg, table("a", "worker", good));
  for (std::string open : {"0.0.0.0:0", "127.corp.example:0"}) {
    auto [rc, out] =
        test::run_process({test::fusee_binary(), "server", "--config", cfg.string(), "--data-dir",
                           (tmp.path() / "data2").string(), "--listen", "127.0.0.1:0",
                           "--admin-listen", "127.0.0.1:0", "--inspect-listen", open},
                          tmp.path() / "open-inspector.log", 20s);
    CHECK(rc == 2);
    CHECK_MESSAGE(out.find("`server.inspect_listen` = \"" + open +
                           "\" is reachable from other hosts") != std::string::npos,
                  out);
  }
}

TEST_CASE("a server without tokens treats AUTH as an unknown kind and the client says so") {
  test::temp_dir dir;
  test::server_process open(dir.path() / "data", "[server]\nshards = 2\n");
  REQUIRE(open.start().empty());
  auto c = open.connect();
  auto r = client::authenticate(c, client_secret, 5s);
  REQUIRE(!r);
  CHECK(r.err().code == err_code::unauthorized);
  CHECK(r.err().message.find("the server takes no tokens") != std::string::npos);
  auto plain = open.connect();  // the normative exchange is unchanged
  CHECK(client::client_hello(plain, "cli", 5s));
}

TEST_CASE("a node without tokens answers HTTP only for the hosts it is named by: a page whose name "
          "was rebound to it is refused") {
  test::temp_dir dir;
  test::server_process open(dir.path() / "data",
                            "[server]\nshards = 2\nallowed_hosts = [\"Fusee.Internal\"]\n");
  REQUIRE(open.start().empty());
  auto api = open.http_port();
  auto admin = open.admin_port();
  auto host = [](const std::string& h) { return std::vector<std::string>{"Host: " + h}; };
  // What a rebinding page's browser sends: its own name as the Host, no Origin on a GET.
  for (auto [port, path] : {std::pair{api, "/v1/workflows/w1"}, std::pair{admin, "/v1/overview"},
                            std::pair{admin, "/metrics"}, std::pair{admin, "/"}}) {
    CAPTURE(path);
    auto [status, body] = test::http_request("GET", port, path, "", 5000,
                                             host("evil.example:" + std::to_string(port)));
    CHECK(status == 403);
    CHECK(body.find("\"code\":\"host_not_allowed\"") != std::string::npos);
    CHECK(body.find("server.allowed_hosts") != std::string::npos);
  }
  // Refused before the body is read.
  auto post = answer_to_head(api, "POST /v1/workflows/steps/w1 HTTP/1.1\r\nHost: evil.example\r\n"
                                  "Content-Length: 1000000\r\n\r\n");
  CHECK(post.rfind("HTTP/1.1 403", 0) == 0);
  // Addresses, localhost and the configured name (any case, any port) are answered, as is a
  // request without Host.
  for (auto h : {"127.0.0.1", "localhost:1", "app.localhost", "[::1]:7402", "FUSEE.internal:80"}) {
    CAPTURE(h);
    CHECK(test::http_request("GET", admin, "/v1/overview", "", 5000, host(h)).first == 200);
  }
  CHECK(test::http_request("GET", admin, "/v1/overview", "", 5000, {"Host:"}).first == 200);
  // Probes answer whatever the Host: they show nothing a page could use.
  CHECK(test::http_request("GET", admin, "/healthz", "", 5000, host("fusee-a:7401")).first == 200);
  CHECK(test::http_request("GET", admin, "/readyz", "", 5000, host("fusee-a:7401")).first == 200);
  CHECK(open.log().find("host=\"evil.example\"") != std::string::npos);
}

TEST_CASE("a node with tokens answers a request for any host that carries one") {
  fixture f;
  auto [status, body] = test::http_request("GET", f.server.admin_port(), "/v1/overview", "", 5000,
                                           {bearer(read_secret), "Host: fusee.example.com"});
  CHECK(status == 200);
  CHECK(test::http_request("GET", f.server.admin_port(), "/healthz", "", 5000,
                           {"Host: fusee.example.com"})
            .first == 200);
}
