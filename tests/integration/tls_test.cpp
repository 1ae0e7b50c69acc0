// TLS 1.3 on the worker listener, the HTTP API and the admin server (certificates made with the
// openssl CLI, as docs/operations.md "Securing a node" does), and tokens bound to the session.
#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "pki.hpp"
#include "raw_socket.hpp"
#include "server_process.hpp"
#include "tls/acceptor.hpp"
#include "tls/context.hpp"
#include "tls/peer_refresh.hpp"
#include "tls/terminator.hpp"
#include "tls/tunnel.hpp"

using namespace fusee;
using namespace std::chrono_literals;
using proto::err_code;
namespace fs = std::filesystem;

namespace {

const std::string worker_secret = "w-0123456789abcdef0123456789abcdef";

struct fixture {
  test::pki certs;
  test::temp_dir dir;
  test::server_process server;
  static std::string token_toml(const fs::path& dir) {
    std::ofstream{dir / "worker.token"} << worker_secret << "\n";
    return "[[token]]\nname = \"workers\"\nscope = \"worker\"\nfile = \"" +
           (dir / "worker.token").string() + "\"\n";
  }
  explicit fixture(bool mutual = true, bool tokens = false, const std::string& cert = "node",
                   const std::string& extra = "")
      : server(dir.path() / "data", "[server]\nshards = 2\n" + certs.tls_toml(cert, mutual) +
                                        (tokens ? token_toml(dir.path()) : "") + extra) {
    auto err = server.start();
    REQUIRE_MESSAGE(err.empty(), err);
  }
  proto::result<client::connection> open(const client::security& sec) {
    return client::connection::open("127.0.0.1", server.port(), sec, 5s);
  }
};

/// GET over HTTPS, with the client's certificate when `client_cert`: {status, body}; status 0
/// and curl's error if it failed.
std::pair<long, std::string> https_get(uint16_t port, const std::string& path, const test::pki& p,
                                       bool client_cert, const std::string& bearer = "") {
  test::https_files files{p.at("ca.pem").string(), client_cert ? p.at("client.pem").string() : "",
                          client_cert ? p.at("client.key").string() : ""};
  std::vector<std::string> headers;
  if (!bearer.empty()) headers.push_back("Authorization: Bearer " + bearer);
  return test::http_request("GET", port, path, "", 10000, headers, &files);
}

}  // namespace

TEST_CASE("a plaintext connection to a TLS listener is refused clearly") {
  fixture f;
  auto c = f.server.connect();  // plain TCP
  c.send(proto::client_hello{proto::request_head{1}, 1, "plain"});
  auto r = c.receive(5s);
  REQUIRE(r);
  auto* e = std::get_if<proto::err>(&*r);
  REQUIRE(e != nullptr);
  CHECK(e->code == uint16_t(err_code::unauthorized));
  CHECK(e->message.find("this listener speaks TLS 1.3") != std::string::npos);
  auto [status, body] = test::http_get(f.server.admin_port(), "/healthz");
  CHECK(status == 400);
  CHECK(body.find("this server speaks HTTPS (TLS 1.3), not HTTP") != std::string::npos);
  CHECK(body.find("\"code\":\"https_only\"") != std::string::npos);
}

TEST_CASE("a worker leases over mutual TLS and its token proof is bound to the TLS session") {
  fixture f(true, true);
  auto sec = f.certs.client();
  sec.token = worker_secret;
  auto w = f.open(sec);
  REQUIRE_MESSAGE(w, (w ? "" : w.err().to_string()));
  CHECK(w->tls());
  CHECK(w->binding().size() == 32);
  auto lease = client::hello(*w, proto::offer_serve_calls, 0, "tls-worker", 5s);
  REQUIRE_MESSAGE(lease, (lease ? "" : lease.err().to_string()));
  CHECK(lease->grants.size() == 2);
  // The same token proven without the TLS binding (as a relayed proof would be) is refused.
  auto unbound = f.open(f.certs.client());
  REQUIRE(unbound);
  auto r = client::authenticate(*unbound, worker_secret, 5s, {});
  REQUIRE(!r);
  CHECK(r.err().code == err_code::unauthorized);
  CHECK(r.err().message.find("matches none of this server's tokens") != std::string::npos);
}

TEST_CASE("a TLS handshake that gets no answer is no refusal: its error is io (a client command "
          "exits 2, not 1)") {
  test::pki certs;
  std::optional<test::loopback_listener> mute{std::in_place};  // takes connections, says nothing
  auto c = client::connection::open("127.0.0.1", mute->port, certs.client(), 300ms);
  mute.reset();
  REQUIRE_FALSE(c);
  CHECK_MESSAGE(c.err().code == err_code::io, c.err().to_string());
}

TEST_CASE("a wrong CA, a wrong name, a name only in the CN and an expired certificate are "
          "refused with clear errors") {
  fixture f;
  auto wrong_ca = f.open(f.certs.client("client", "rogue-ca"));
  REQUIRE(!wrong_ca);
  // OpenSSL says "unable to get local issuer certificate" or "self-signed certificate in
  // certificate chain", depending on what the chain holds.
  CHECK_MESSAGE(wrong_ca.err().message.find("the server's certificate was refused: ") !=
                    std::string::npos,
                wrong_ca.err().message);
  auto named = f.certs.client();
  named.tls.server_name = "fusee.example";
  auto wrong_name = f.open(named);
  REQUIRE(!wrong_name);
  CHECK(wrong_name.err().message.find("the server's certificate was refused: hostname mismatch") !=
        std::string::npos);
  named.tls.server_name = "localhost";  // a name the certificate carries
  CHECK(f.open(named));
  // A name in the certificate's CN alone is no name: only its subjectAltNames count.
  fixture cn_only(true, false, "cn-host");
  auto by_cn = cn_only.certs.client();
  by_cn.tls.server_name = "fusee-node";
  auto cn_refused = cn_only.open(by_cn);
  REQUIRE(!cn_refused);
  CHECK(cn_refused.err().message.find("the server's certificate was refused: hostname mismatch") !=
        std::string::npos);
  fixture old(true, false, "expired");
  auto expired = old.open(old.certs.client());
  REQUIRE(!expired);
  CHECK(expired.err().message.find("certificate has expired") != std::string::npos);
}

TEST_CASE("a listener with a CA refuses clients without a certificate or with a stranger's") {
  fixture f;
  auto bare = f.open(f.certs.client(""));  // checks the server, shows no certificate
  REQUIRE(bare);  // TLS 1.3: the client's side of the handshake ends before the server checks
  auto n = client::client_hello(*bare, "bare", 5s);
  REQUIRE(!n);
  CHECK(n.err().message.find("permission denied: the server requires a client certificate; add "
                             "cert_file and key_file") != std::string::npos);
  // A certificate from a CA the node does not trust: the client sees the node's alert ("unknown
  // ca") or, when the node closed first, the end of the connection; the node says why.
  auto rogue = f.open(f.certs.client("rogue"));
  if (rogue) CHECK(!client::client_hello(*rogue, "rogue", 5s));
  CHECK(f.server.log().find("the client sent no certificate") != std::string::npos);
  bool logged = false;
  for (int i = 0; i < 100 && !logged; ++i) {
    logged = f.server.log().find("the client's certificate was refused") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(20ms);
  }
  CHECK_MESSAGE(logged, f.server.log());
  // Meanwhile a client with the right certificate is served.
  auto good = f.open(f.certs.client());
  REQUIRE(good);
  CHECK(client::client_hello(*good, "good", 5s));
}

TEST_CASE("the HTTP API and the admin server speak TLS 1.3 with the node's certificate") {
  fixture f(true, true);
  auto [health, hbody] = https_get(f.server.admin_port(), "/healthz", f.certs, true);
  CHECK(health == 200);
  auto [metrics, mbody] =
      https_get(f.server.admin_port(), "/metrics", f.certs, true, worker_secret);
  CHECK(metrics == 200);
  CHECK(mbody.find("fusee_connections") != std::string::npos);
  CHECK(mbody.find("fusee_tls_handshakes_total{listener=\"admin\",outcome=\"done\"} ") !=
        std::string::npos);
  CHECK(mbody.find("fusee_tls_handshakes_total{listener=\"workers\",outcome=\"failed\"} 0") !=
        std::string::npos);
  auto [no_cert, why] = https_get(f.server.admin_port(), "/healthz", f.certs, false);
  CHECK(no_cert == 0);
  auto [api, abody] = https_get(f.server.http_port(), "/v1/workflows/w1", f.certs, true);
  CHECK(api == 401);  // TLS passed; the token is still asked for
}

TEST_CASE("a TLS handshake that never comes is cut after limits.hello_timeout_ms") {
  fixture f(true, false, "node", "[limits]\nhello_timeout_ms = 300\n");
  auto silent = f.server.connect();  // TCP only: no ClientHello
  auto started = std::chrono::steady_clock::now();
  auto r = silent.receive(5s);
  CHECK(!r);
  CHECK(silent.closed());
  CHECK(std::chrono::steady_clock::now() - started < 3s);
  auto good = f.open(f.certs.client());  // the listener keeps serving
  REQUIRE(good);
  CHECK(client::client_hello(*good, "good", 5s));
  auto [status, metrics] = https_get(f.server.admin_port(), "/metrics", f.certs, true);
  CHECK(status == 200);
  CHECK(
      metrics.find("fusee_tls_handshakes_total{listener=\"workers\",outcome=\"timed_out\"} 1\n") !=
      std::string::npos);
}

TEST_CASE("over TLS one thread may send while another receives, as a worker's keep-alive pings "
          "while its loop reads: every PING is answered, with no TLS error") {
  fixture f;
  auto c = f.open(f.certs.client());
  REQUIRE_MESSAGE(c, (c ? "" : c.err().to_string()));
  REQUIRE(client::client_hello(*c, "two-threads", 5s));
  constexpr uint64_t pings = 3000;
  std::thread sender([&] {
    for (uint64_t id = 1; id <= pings; ++id)
      if (!c->send(proto::ping{proto::request_head{id}})) return;
  });
  uint64_t answered = 0;
  std::string failure;
  auto deadline = std::chrono::steady_clock::now() + 30s;
  while (answered < pings && std::chrono::steady_clock::now() < deadline) {
    auto r = c->receive(1s);
    if (!r) {
      if (c->timed_out()) continue;
      failure = r.err().to_string();
      break;
    }
    auto* ok = std::get_if<proto::ok>(&*r);
    if (ok == nullptr) {
      failure = "got " + proto::kind_name(static_cast<uint8_t>(proto::kind_of(*r)));
      break;
    }
    CHECK(ok->id == answered + 1);  // in order
    ++answered;
  }
  sender.join();
  CHECK_MESSAGE(failure.empty(), failure);
  CHECK(answered == pings);
}

TEST_CASE("over TLS a connection past limits.max_http_connections is closed before its handshake, "
          "which holds a place while it is going on") {
  fixture f(true, false, "node", "[limits]\nmax_http_connections = 1\n");
  std::optional<test::raw_socket> silent;
  silent.emplace(f.server.http_port());  // TCP only: a handshake that has not begun
  // (An unknown route: answered at once, 404.)
  auto [refused, why] = https_get(f.server.http_port(), "/nope", f.certs, true);
  CHECK(refused == 0);
  silent.reset();  // its place frees once the terminator sees it closed
  long status = 0;
  for (int i = 0; i < 100 && status == 0; ++i) {
    status = https_get(f.server.http_port(), "/nope", f.certs, true).first;
    if (status == 0) std::this_thread::sleep_for(20ms);
  }
  CHECK(status == 404);
  auto [ok, metrics] = https_get(f.server.admin_port(), "/metrics", f.certs, true);
  CHECK(ok == 200);
  CHECK(metrics.find("fusee_limit_refused_total{limit=\"http_connections\"} ") !=
        std::string::npos);
  CHECK(metrics.find("fusee_limit_refused_total{limit=\"http_connections\"} 0\n") ==
        std::string::npos);
  CHECK(f.server.log().find("1 connections are open (limits.max_http_connections): new ones are "
                            "closed as they come, before their handshake listener=HTTP "
                            "127.0.0.1:" +
                            std::to_string(f.server.http_port()) + " ") != std::string::npos);
}

namespace {

/// A terminator whose peers stall after 1 s, behind a listener on a free port; each connection it
/// hands over is kept in `delivered`.
struct stalling_listener {
  std::mutex mu;
  std::condition_variable cv;
  int delivered = -1;
  std::unique_ptr<tls::terminator> server;
  std::unique_ptr<tls::acceptor> listening;
  explicit stalling_listener(const test::pki& certs) {
    tls::terminator::options so;
    so.ctx = *tls::server_context({certs.at("node.pem"), certs.at("node.key"), ""});
    so.stalled_peer_ms = 1000;
    so.what = "test";
    so.deliver = [this](tls::handed_over h) {
      std::lock_guard lk{mu};
      delivered = h.fd;
      cv.notify_all();
    };
    server = tls::terminator::start(std::move(so));
    auto a = tls::acceptor::start("127.0.0.1", 0, *server);
    REQUIRE(a);
    listening = std::move(*a);
  }
  /// The plaintext end of the connection handed over.
  int handed_over() {
    std::unique_lock lk{mu};
    REQUIRE(cv.wait_for(lk, 5s, [&] { return delivered >= 0; }));
    return delivered;
  }
};

/// Writes to `fd` until it stays full for 200 ms (the kernel's buffers on the way grow for a
/// while), then waits up to 10 s for the terminator to close its end (POLLHUP: not the end of
/// the peer's side, which a half-close shows as a read of 0): true if it did.
bool fills_then_ends(int fd) {
  std::vector<char> chunk(64 << 10, 'x');
  auto started = std::chrono::steady_clock::now();
  bool ended = false;  // (on a slow machine the close may come while this still writes)
  for (pollfd p{fd, POLLOUT, 0}; !ended && ::poll(&p, 1, 200) > 0 && (p.revents & POLLOUT);) {
    auto n = ::send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    ended = (p.revents & (POLLHUP | POLLERR)) || (n < 0 && errno == EPIPE);
    if (std::chrono::steady_clock::now() - started > 20s) return false;
  }
  auto full = std::chrono::steady_clock::now();
  while (!ended && std::chrono::steady_clock::now() - full < 10s) {
    pollfd p{fd, 0, 0};  // POLLHUP and POLLERR are always reported
    ended = ::poll(&p, 1, 100) > 0 && (p.revents & (POLLHUP | POLLERR));
  }
  ::close(fd);
  return ended;
}

}  // namespace

TEST_CASE("a TLS peer that takes none of the bytes waiting for it is closed after the stall "
          "time, freeing its place") {
  test::pki certs;
  stalling_listener l(certs);
  // The client side: a terminator dialling out, whose plaintext end this test never reads, so it
  // stops reading TLS once its buffer is full and the server's bytes wait.
  tls::terminator::options co;
  co.client_ctx = *tls::client_context({certs.at("ca.pem"), "", "", ""});
  co.what = "client";
  auto client = tls::terminator::start(std::move(co));
  std::string why;
  int tcp = tls::dial_tcp("127.0.0.1", l.listening->port(), 5000, &why);
  REQUIRE_MESSAGE(tcp >= 0, why);
  int pair[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) == 0);
  client->add_outbound(tcp, pair[0], "127.0.0.1", "127.0.0.1");
  CHECK(fills_then_ends(l.handed_over()));
  CHECK(l.server->stalled() == 1);
  ::close(pair[1]);
}

TEST_CASE("a TLS peer that closes its side (close_notify) and then reads nothing is closed after "
          "the stall time too") {
  test::pki certs;
  stalling_listener l(certs);
  auto ctx = *tls::client_context({certs.at("ca.pem"), "", "", ""});
  std::string why;
  int tcp = tls::dial_tcp("127.0.0.1", l.listening->port(), 5000, &why);
  REQUIRE_MESSAGE(tcp >= 0, why);
  ::fcntl(tcp, F_SETFL, ::fcntl(tcp, F_GETFL) & ~O_NONBLOCK);
  SSL* ssl = SSL_new(ctx.get());
  tls::expect_peer_name(ssl, "127.0.0.1");
  SSL_set_fd(ssl, tcp);
  REQUIRE(SSL_connect(ssl) == 1);
  SSL_shutdown(ssl);  // this side says no more, and never reads
  CHECK(fills_then_ends(l.handed_over()));
  SSL_free(ssl);
  ::close(tcp);
}

namespace {

/// The plaintext ends a terminator hands over, kept until the test ends (then closed). Declare
/// it before the terminator, which may hand one over until it stops.
struct handed_ends {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> fds;
  std::function<void(tls::handed_over)> deliver() {
    return [this](tls::handed_over h) {
      std::lock_guard lk{mu};
      fds.push_back(h.fd);
      cv.notify_all();
    };
  }
  /// True once `n` were handed over (within 5 s).
  bool await(size_t n) {
    std::unique_lock lk{mu};
    return cv.wait_for(lk, 5s, [&] { return fds.size() == n; });
  }
  ~handed_ends() {
    std::lock_guard lk{mu};
    for (int fd : fds)
      ::close(fd);
  }
};

/// A TLS terminator (the node's certificate) on a loopback port with `strangers` places for
/// strangers and known peers given as (addresses, places); what finishes its handshake is handed
/// over into `handed`.
struct known_peers_port {
  test::pki certs;
  handed_ends handed;
  std::unique_ptr<tls::terminator> server;
  std::unique_ptr<tls::acceptor> listening;
  uint16_t port = 0;
  known_peers_port(uint32_t strangers,
                   const std::vector<std::pair<std::vector<std::string>, uint32_t>>& known) {
    tls::terminator::options so;
    so.ctx = *tls::server_context({certs.at("node.pem"), certs.at("node.key"), ""});
    so.max_connections = strangers;
    so.limit_name = "strangers";
    for (auto& [addresses, places] : known)
      so.add_known(addresses, places);
    so.known_limit_name = "known";
    so.what = "test";
    so.deliver = handed.deliver();
    server = tls::terminator::start(std::move(so));
    auto l = tls::acceptor::start("127.0.0.1", 0, *server);
    REQUIRE(l);
    listening = std::move(*l);
    port = listening->port();
  }
};

}  // namespace

TEST_CASE("a terminator's places per address count handshakes only: connections that finished "
          "theirs leave room, silent ones from that address take it") {
  test::pki certs;
  tls::terminator::options so;
  so.ctx = *tls::server_context({certs.at("node.pem"), certs.at("node.key"), ""});
  so.max_connections = 10;
  so.max_per_peer = 2;
  so.what = "test";
  handed_ends handed;
  so.deliver = handed.deliver();
  auto server = tls::terminator::start(std::move(so));
  auto listening = tls::acceptor::start("127.0.0.1", 0, *server);
  REQUIRE(listening);
  auto ctx = *tls::client_context({certs.at("ca.pem"), "", "", ""});
  // A client's handshake on a blocking socket: true if the server finished it.
  auto handshake = [&](int* tcp_out) {
    std::string why;
    int tcp = tls::dial_tcp("127.0.0.1", (*listening)->port(), 5000, &why);
    REQUIRE_MESSAGE(tcp >= 0, why);
    ::fcntl(tcp, F_SETFL, ::fcntl(tcp, F_GETFL) & ~O_NONBLOCK);
    timeval five{5, 0};
    ::setsockopt(tcp, SOL_SOCKET, SO_RCVTIMEO, &five, sizeof five);
    SSL* ssl = SSL_new(ctx.get());
    tls::expect_peer_name(ssl, "127.0.0.1");
    SSL_set_fd(ssl, tcp);
    bool done = SSL_connect(ssl) == 1;
    SSL_free(ssl);  // the socket stays open: the connection holds its place
    *tcp_out = tcp;
    return done;
  };
  std::vector<int> open;
  for (int i = 0; i < 4; ++i) {  // more than 2, one after another: each finished its handshake
    int tcp = -1;
    CHECK(handshake(&tcp));
    open.push_back(tcp);
  }
  REQUIRE(handed.await(4));  // the server's side of all four is done too
  test::raw_socket silent1((*listening)->port()), silent2((*listening)->port());
  int tcp = -1;
  CHECK_FALSE(handshake(&tcp));  // two handshakes from 127.0.0.1 are going on: closed at once
  open.push_back(tcp);
  CHECK(server->refused() == 1);
  for (int fd : open)
    ::close(fd);
}

namespace {

/// Sends `bytes` on `fd` and reads them on `to`: true if all arrived within 5 s.
bool passes(int fd, int to, const std::string& bytes) {
  if (::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) != ssize_t(bytes.size())) return false;
  std::string got;
  while (got.size() < bytes.size()) {
    pollfd p{to, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return false;
    char buf[256];
    auto n = ::recv(to, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    got.append(buf, size_t(n));
  }
  return got == bytes;
}

}  // namespace

TEST_CASE("a terminator without TLS relays bytes both ways and each side's close, and closes "
          "connections over its bound as they come until a place frees") {
  test::loopback_listener far;
  tls::terminator::options o;  // no ctx: plain TCP in, plain TCP out
  o.open_plain = [port = far.port](std::string* why) {
    return tls::dial_tcp("127.0.0.1", port, 1000, why);
  };
  o.max_connections = 1;
  o.limit_name = "the test's 1";
  o.what = "test";
  auto relay = tls::terminator::start(std::move(o));
  auto listening = tls::acceptor::start("127.0.0.1", 0, *relay);
  REQUIRE(listening);
  uint16_t port = (*listening)->port();

  std::optional<test::raw_socket> first;
  first.emplace(port);
  int far_end = far.accept_one();
  REQUIRE(far_end >= 0);
  CHECK(passes(first->fd, far_end, "ping"));
  CHECK(passes(far_end, first->fd, "pong"));
  CHECK(relay->handshakes() == 0);  // no TLS

  test::raw_socket second(port);  // over the bound: closed before any byte, never relayed
  CHECK(second.read(5s) == std::string{});
  CHECK(relay->refused() == 1);

  ::shutdown(first->fd, SHUT_WR);  // a half-close reaches the far side, which may still answer
  CHECK(test::raw_socket::read_fd(far_end, 5s) == std::string{});
  CHECK(passes(far_end, first->fd, "bye"));
  ::close(far_end);  // and its close comes back
  CHECK(first->read(5s) == std::string{});
  first.reset();

  // The place frees once the relay saw both ends go: a connection is then relayed, not closed.
  std::optional<test::raw_socket> third;
  int again = -1;
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (again < 0 && std::chrono::steady_clock::now() < deadline) {
    third.emplace(port);
    pollfd p[2] = {{far.fd, POLLIN, 0}, {third->fd, POLLIN, 0}};
    REQUIRE(::poll(p, 2, 5000) > 0);
    if (p[0].revents & POLLIN) again = ::accept4(far.fd, nullptr, nullptr, SOCK_CLOEXEC);
  }
  REQUIRE(again >= 0);
  CHECK(passes(third->fd, again, "again"));
  ::shutdown(again, SHUT_WR);  // the far side's end (CAF's) ends the connection, as with TLS
  CHECK(third->read(5s) == std::string{});
  ::close(again);
}

TEST_CASE("known peers that share an address share their places, added together") {
  CHECK(tls::unmapped("::ffff:10.0.0.7") == "10.0.0.7");
  CHECK(tls::unmapped("::1") == "::1");
  CHECK(tls::unmapped("10.0.0.7") == "10.0.0.7");
  tls::terminator::options o;
  o.add_known({"10.0.0.1"}, 4);
  o.add_known({"10.0.0.2", "fd00::2"}, 4);          // one peer, two addresses: still 4
  o.add_known({"10.0.0.3", "::ffff:10.0.0.1"}, 4);  // shares 10.0.0.1 with the first
  o.add_known({"10.0.0.4"}, 4);
  CHECK(o.known_peers.at("10.0.0.3") == o.known_peers.at("10.0.0.1"));
  CHECK(o.known_places[o.known_peers.at("10.0.0.1")] == 8);
  CHECK(o.known_peers.at("fd00::2") == o.known_peers.at("10.0.0.2"));
  CHECK(o.known_places[o.known_peers.at("10.0.0.2")] == 4);
  CHECK(o.known_places[o.known_peers.at("10.0.0.4")] == 4);
  o.add_known({"10.0.0.4", "10.0.0.2"}, 4);  // a peer at both: the two merge
  CHECK(o.known_peers.at("10.0.0.4") == o.known_peers.at("fd00::2"));
  CHECK(o.known_places[o.known_peers.at("10.0.0.4")] == 12);
  o.add_known({"10.0.0.5", "10.0.0.5", "::ffff:10.0.0.5"}, 4);  // one address said three ways
  CHECK(o.known_places[o.known_peers.at("10.0.0.5")] == 4);
  o.add_known({"10.0.0.1", "10.0.0.4", "10.0.0.5"}, 4);  // three peers merge into one
  auto all = o.known_peers.at("10.0.0.1");
  for (auto ip : {"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "fd00::2"})
    CHECK(o.known_peers.at(ip) == all);
  CHECK(o.known_places[all] == 8 + 12 + 4 + 4);
  o.add_known({}, 4);  // no address: nothing
  uint32_t sum = 0;
  for (auto n : o.known_places)
    sum += n;
  CHECK(sum == 8 + 12 + 4 + 4);
}

TEST_CASE("a terminator's known peers have places of their own, each peer its own: strangers "
          "who fill theirs leave those alone, and each closes its own extras") {
  // One place each; 127.0.0.1 as a dual-stack listener would name it.
  known_peers_port k(2, {{{"::ffff:127.0.0.1"}, 1}, {{"127.0.0.3"}, 1}});
  auto& certs = k.certs;
  auto& handed = k.handed;
  auto& server = k.server;
  uint16_t port = k.port;
  auto ctx = *tls::client_context({certs.at("ca.pem"), "", "", ""});
  // A TLS handshake from `from` on a blocking socket: true once the server handed it over.
  auto handshake = [&](const std::string& from, size_t handed_then) {
    test::raw_socket tcp(port, "", from);
    SSL* ssl = SSL_new(ctx.get());
    tls::expect_peer_name(ssl, "127.0.0.1");
    SSL_set_fd(ssl, tcp.fd);
    bool done = SSL_connect(ssl) == 1;
    SSL_free(ssl);
    return done && handed.await(handed_then);
  };
  // Two strangers (at 127.0.0.2) in their handshakes fill their places; a third is closed.
  test::raw_socket s1(port, "", "127.0.0.2"), s2(port, "", "127.0.0.2");
  test::raw_socket s3(port, "", "127.0.0.2");
  CHECK(s3.read(5s) == std::string{});
  // Each known address still has its place: 127.0.0.1's ...
  test::raw_socket k1(port);  // (its handshake not begun: it holds 127.0.0.1's one place)
  test::raw_socket k2(port);  // over 127.0.0.1's place: closed
  CHECK(k2.read(5s) == std::string{});
  // ... and 127.0.0.3's, which 127.0.0.1 cannot take: a handshake from it is done.
  CHECK(handshake("127.0.0.3", 1));
  CHECK(server->refused() == 2);
}

TEST_CASE("an address has only so many relayed connections that sent nothing yet, while those "
          "that spoke do not count") {
  test::loopback_listener far;
  tls::terminator::options o;
  o.open_plain = [port = far.port](std::string* why) {
    return tls::dial_tcp("127.0.0.1", port, 1000, why);
  };
  o.handshake_timeout_ms = 60000;  // (none is cut while this runs)
  o.max_per_peer = 2;
  o.what = "test";
  auto relay = tls::terminator::start(std::move(o));
  auto listening = tls::acceptor::start("127.0.0.1", 0, *relay);
  REQUIRE(listening);
  uint16_t port = (*listening)->port();
  test::raw_socket spoke(port, "x");  // its first byte: no longer "in its handshake"
  int far_end = far.accept_one();
  REQUIRE(far_end >= 0);
  CHECK(test::raw_socket::read_fd(far_end, 5s) == std::string{"x"});
  test::raw_socket silent1(port), silent2(port);
  test::raw_socket third(port);  // a third silent one from 127.0.0.1: closed at once
  CHECK(third.read(5s) == std::string{});
  CHECK(relay->refused() == 1);
  CHECK(passes(spoke.fd, far_end, "still here"));
  ::close(far_end);
}

TEST_CASE("a relayed connection that sends nothing is closed after the handshake time-out, one "
          "that spoke stays") {
  test::loopback_listener far;
  tls::terminator::options o;
  o.open_plain = [port = far.port](std::string* why) {
    return tls::dial_tcp("127.0.0.1", port, 1000, why);
  };
  o.handshake_timeout_ms = 300;
  o.what = "test";
  auto relay = tls::terminator::start(std::move(o));
  auto listening = tls::acceptor::start("127.0.0.1", 0, *relay);
  REQUIRE(listening);
  uint16_t port = (*listening)->port();
  // (Its byte is there when the relay first looks at it, which is before any time-out.)
  test::raw_socket spoke(port, "x");
  int far_end = far.accept_one();
  REQUIRE(far_end >= 0);
  CHECK(test::raw_socket::read_fd(far_end, 5s) == std::string{"x"});
  test::raw_socket silent(port);
  CHECK(silent.closed_within(10s));
  CHECK(relay->timeouts() == 1);
  CHECK(passes(spoke.fd, far_end, "still here"));  // not cut
  ::close(far_end);
}

TEST_CASE("a TLS handshake that trickles its bytes is still cut after the handshake time-out") {
  test::pki certs;
  tls::terminator::options so;
  so.ctx = *tls::server_context({certs.at("node.pem"), certs.at("node.key"), ""});
  so.handshake_timeout_ms = 500;
  so.what = "test";
  so.deliver = [](tls::handed_over h) { ::close(h.fd); };
  auto server = tls::terminator::start(std::move(so));
  auto listening = tls::acceptor::start("127.0.0.1", 0, *server);
  REQUIRE(listening);
  // A record header that promises a long ClientHello, then one byte of it every 50 ms.
  test::raw_socket slow((*listening)->port(), std::string("\x16\x03\x01\x40\x00", 5));
  bool closed = false;
  auto t0 = std::chrono::steady_clock::now();
  while (!closed && std::chrono::steady_clock::now() - t0 < 10s) {
    (void)!::send(slow.fd, "\x01", 1, MSG_NOSIGNAL);
    auto got = slow.read(50ms);  // paces the bytes; the close is what it waits for
    closed = got && got->empty();
  }
  CHECK(closed);
  CHECK(server->timeouts() == 1);
}

TEST_CASE("a dialled connection leaves from the first source address of its family that is "
          "loopback where the peer is, else from the kernel's pick, and only this host's addresses "
          "count as local") {
  int l = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(at);
  REQUIRE(::bind(l, reinterpret_cast<sockaddr*>(&at), sizeof(at)) == 0);
  REQUIRE(::listen(l, 8) == 0);
  REQUIRE(::getsockname(l, reinterpret_cast<sockaddr*>(&at), &len) == 0);
  // The address the listener sees a connection dialled from `sources` come from.
  auto seen_from = [&](const std::vector<std::string>& sources) {
    std::string why;
    int fd = tls::dial_tcp("127.0.0.1", ntohs(at.sin_port), 2000, &why, -1, 0, sources);
    REQUIRE_MESSAGE(fd >= 0, why);
    sockaddr_in peer{};
    socklen_t plen = sizeof(peer);
    int in = ::accept(l, reinterpret_cast<sockaddr*>(&peer), &plen);
    REQUIRE(in >= 0);
    char ip[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &peer.sin_addr, ip, sizeof(ip));
    ::close(in);
    ::close(fd);
    return std::string{ip};
  };
  CHECK(seen_from({}) == "127.0.0.1");
  CHECK(seen_from({"127.0.0.2"}) == "127.0.0.2");
  // Another family, a non-loopback address for a loopback peer, a wildcard: none suits.
  CHECK(seen_from({"::1", "192.0.2.1", "0.0.0.0"}) == "127.0.0.1");
  CHECK(seen_from({"192.0.2.1", "127.0.0.3", "127.0.0.2"}) == "127.0.0.3");
  ::close(l);
  // 192.0.2.1 (TEST-NET-1) is on no interface here; wildcards and names are no source.
  CHECK(tls::local_addresses({"127.0.0.2", "0.0.0.0", "::", "192.0.2.1", "localhost"}) ==
        std::vector<std::string>{"127.0.0.2"});
  // A lookup by family: a literal of one family is "no address" for the other, not a failure.
  for (std::string ip : {"127.0.0.2", "::1"}) {
    auto found = tls::look_up(ip);
    CHECK(found.addresses == std::vector<std::string>{ip});
    CHECK_FALSE(found.v4_failed);
    CHECK_FALSE(found.v6_failed);
  }
}

TEST_CASE("a terminator learns a known peer's new addresses while it runs: connections from them "
          "take that peer's places, not the strangers', and a peer it did not know gets its own") {
  known_peers_port k(1, {{{"127.0.0.3"}, 1}});
  auto& server = k.server;
  uint16_t port = k.port;
  // Connections whose handshakes never begin hold their places (cut only after 10 s); one that
  // finds no place is closed at once.
  auto held = [](test::raw_socket& s) { return !s.read(300ms).has_value(); };
  auto closed = [](test::raw_socket& s) { return s.read(5s) == std::string{}; };
  test::raw_socket stranger(port, "", "127.0.0.2");  // the strangers' one place
  CHECK(held(stranger));
  test::raw_socket early(port, "", "127.0.0.5");  // a stranger too, until learned
  CHECK(closed(early));
  CHECK_FALSE(server->knows("127.0.0.5"));
  auto peer = server->peer_of("127.0.0.3");
  REQUIRE(peer.has_value());
  CHECK(server->assign({"127.0.0.3", "::ffff:127.0.0.5"}, peer, 1) ==
        std::vector<std::string>{"127.0.0.5"});
  CHECK(server->knows("127.0.0.5"));
  CHECK(server->assign({"127.0.0.5"}, peer, 1).empty());  // known already
  test::raw_socket moved(port, "", "127.0.0.5");          // the peer's one place
  CHECK(held(moved));
  test::raw_socket old(port, "", "127.0.0.3");  // the same peer, its place taken
  CHECK(closed(old));
  // A peer none of whose addresses was known (its host did not resolve at start).
  std::optional<uint32_t> none;
  CHECK(server->assign({"127.0.0.6"}, none, 1) == std::vector<std::string>{"127.0.0.6"});
  CHECK(none.has_value());
  CHECK(none != peer);
  test::raw_socket fresh(port, "", "127.0.0.6");
  CHECK(held(fresh));
  CHECK(server->refused() == 2);
}

/// A resolver for peer_refresh that the test sets; it may outlive the refresh (a lookup is not
/// waited for), so it owns what it reads. A host not set finds nothing.
struct fake_dns {
  std::mutex mu;
  std::map<std::string, tls::host_lookup> hosts;
  void set(const std::string& host, std::vector<std::string> addresses, bool v4_failed = false,
           bool v6_failed = false) {
    std::lock_guard lk{mu};
    hosts[host] = {std::move(addresses), v4_failed, v6_failed};
  }
  static tls::peer_refresh::resolver resolver(std::shared_ptr<fake_dns> dns) {
    return [dns](const std::string& host) {
      std::lock_guard lk{dns->mu};
      return dns->hosts[host];
    };
  }
};

/// A refresh thread's rounds are awaited by what they change (every 10 ms).
template <class Done>
bool soon(Done done) {
  auto until = std::chrono::steady_clock::now() + 5s;
  while (!done() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);
  return done();
}

TEST_CASE("the cluster's nodes are looked up again every period: the addresses they gained count "
          "in their places, and those they lost no longer do, unless another node's host still "
          "has them or the lookup failed") {
  tls::terminator::options so;
  so.what = "test";
  so.max_connections = 1;
  so.deliver = [](tls::handed_over h) { ::close(h.fd); };
  so.add_known({"10.0.0.1"}, 4);
  so.add_known({"10.0.0.3"}, 4);  // c and d, on one host
  auto server = tls::terminator::start(std::move(so));
  auto dns = std::make_shared<fake_dns>();
  auto set = [&](const std::string& host, std::vector<std::string> addresses) {
    dns->set(host, std::move(addresses));
  };
  set("a.test", {"10.0.0.1"});
  set("c.test", {"10.0.0.3"});
  set("d.test", {"10.0.0.3"});
  auto a_places = server->peer_of("10.0.0.1");
  auto cd_places = server->peer_of("10.0.0.3");
  REQUIRE(a_places.has_value());
  REQUIRE(cd_places.has_value());
  tls::peer_refresh refresh(*server,
                            {{"a", "a.test", {"10.0.0.1"}},
                             {"b", "b.test", {}},
                             {"c", "c.test", {"10.0.0.3"}},
                             {"d", "d.test", {"10.0.0.3"}}},
                            4, 10ms, fake_dns::resolver(dns));
  set("a.test", {"10.0.0.7"});  // a restarted elsewhere: its old address may go to anyone
  set("b.test", {"10.0.0.8"});  // b resolves now
  set("d.test", {"10.0.0.4"});  // d moved off the host c is still on
  CHECK(soon([&] {
    return server->knows("10.0.0.7") && server->knows("10.0.0.8") && server->knows("10.0.0.4") &&
           !server->knows("10.0.0.1");
  }));
  CHECK(server->peer_of("10.0.0.7") == a_places);
  CHECK(server->peer_of("10.0.0.3") == cd_places);  // c's still
  auto b_places = server->peer_of("10.0.0.8");
  CHECK(b_places.has_value());
  CHECK(b_places != a_places);
  CHECK_FALSE(server->knows("10.0.0.9"));
  // a's lookup fails from now on; c leaves its host, and its address is b's now (recycled): it
  // moves to b's places, where c's is 10.0.0.5.
  set("a.test", {});
  set("c.test", {"10.0.0.5"});
  set("b.test", {"10.0.0.8", "10.0.0.3"});
  CHECK(soon([&] { return server->knows("10.0.0.5") && server->peer_of("10.0.0.3") == b_places; }));
  CHECK(server->peer_of("10.0.0.5") == cd_places);
  // Rounds later, a still has what it had: a failed lookup changes nothing. And b, listed after
  // a, resolving to a's address as well (a host they share now) does not take it from a.
  set("b.test", {"10.0.0.8", "10.0.0.3", "10.0.0.9", "10.0.0.7"});
  CHECK(soon([&] { return server->knows("10.0.0.9"); }));
  CHECK(server->peer_of("10.0.0.7") == a_places);
  CHECK(server->peer_of("10.0.0.9") == b_places);
}

TEST_CASE("a lookup that answers for one address family while the other's fails keeps what the "
          "node had of the failed family, and one that answers none of a family takes them back") {
  tls::terminator::options so;
  so.what = "test";
  so.max_connections = 1;
  so.deliver = [](tls::handed_over h) { ::close(h.fd); };
  so.add_known({"10.0.0.1", "fd00::1"}, 4);
  auto server = tls::terminator::start(std::move(so));
  auto dns = std::make_shared<fake_dns>();
  dns->set("a.test", {"10.0.0.1", "fd00::1"});
  tls::peer_refresh refresh(*server,
                            {{"a", "a.test", {"10.0.0.1", "fd00::1"}}, {"b", "b.test", {}}}, 4,
                            10ms, fake_dns::resolver(dns));
  // The IPv6 lookup times out while IPv4 answers; b gains an address in the same round.
  dns->set("a.test", {"10.0.0.1"}, false, true);
  dns->set("b.test", {"10.0.0.8"});
  CHECK(soon([&] { return server->knows("10.0.0.8"); }));
  dns->set("b.test", {"10.0.0.8", "10.0.0.9"});  // and a round later
  CHECK(soon([&] { return server->knows("10.0.0.9"); }));
  CHECK(server->knows("fd00::1"));
  CHECK(server->peer_of("fd00::1") == server->peer_of("10.0.0.1"));
  // The same the other way round.
  dns->set("a.test", {"fd00::1"}, true, false);
  dns->set("b.test", {"10.0.0.8"});
  CHECK(soon([&] { return !server->knows("10.0.0.9"); }));
  dns->set("b.test", {"10.0.0.8", "10.0.0.10"});
  CHECK(soon([&] { return server->knows("10.0.0.10"); }));
  CHECK(server->knows("10.0.0.1"));
  // IPv6 answers that there is no such address now: it is taken back.
  dns->set("a.test", {"10.0.0.1"});
  CHECK(soon([&] { return !server->knows("fd00::1"); }));
  CHECK(server->knows("10.0.0.1"));
}
