#include "client/connection.hpp"

#include "client/secret_file.hpp"

#include "tls/context.hpp"
#include "tls/tunnel.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>

namespace fusee::client {

using proto::err_code;
using proto::error;

connection::~connection() {
  close();
}

connection::connection(connection&& other) noexcept
    : fd_(other.fd_), ssl_(other.ssl_), ssl_mu_(std::move(other.ssl_mu_)),
      binding_(std::move(other.binding_)), closed_(other.closed_), timed_out_(other.timed_out_),
      received_any_(other.received_any_), framed_any_(other.framed_any_),
      decoder_(std::move(other.decoder_)) {
  other.fd_ = -1;
  other.ssl_ = nullptr;
}

connection& connection::operator=(connection&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = other.fd_;
    ssl_ = other.ssl_;
    ssl_mu_ = std::move(other.ssl_mu_);
    binding_ = std::move(other.binding_);
    closed_ = other.closed_;
    timed_out_ = other.timed_out_;
    received_any_ = other.received_any_;
    framed_any_ = other.framed_any_;
    decoder_ = std::move(other.decoder_);
    other.fd_ = -1;
    other.ssl_ = nullptr;
  }
  return *this;
}

void connection::close() {
  if (ssl_ != nullptr) {
    SSL_shutdown(ssl_);
    SSL_free(ssl_);
    ssl_ = nullptr;
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

proto::result<connection> connection::open(const std::string& host, uint16_t port,
                                           const security& sec, std::chrono::milliseconds timeout) {
  auto c = open(host, port);
  if (!c) return c.err();
  if (sec.tls.enabled()) {
    auto where = host + ":" + std::to_string(port);
    auto ctx = tls::client_context(sec.tls);
    if (!ctx) return ctx.err();
    c->ssl_ = SSL_new(ctx->get());
    SSL_set_fd(c->ssl_, c->fd_);
    auto name = sec.tls.server_name.empty() ? host : sec.tls.server_name;
    // The listener's certificate must name what was dialled: an IP address or a host name.
    tls::expect_peer_name(c->ssl_, name);
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
    ::setsockopt(c->fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int r = SSL_connect(c->ssl_);
    tv = timeval{};
    ::setsockopt(c->fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (r != 1) {
      // A certificate or the exchange refused (an alert, a protocol error) is a refusal; a time-out
      // or a close during it is no answer (the code, before failure() drains the error queue).
      bool refused =
          SSL_get_error(c->ssl_, r) == SSL_ERROR_SSL || SSL_get_verify_result(c->ssl_) != X509_V_OK;
      return error{refused ? err_code::unauthorized : err_code::io,
                   "TLS with " + where + " failed: " + tls::failure(c->ssl_, r, true)};
    }
    c->binding_ = tls::exporter(c->ssl_);
    c->ssl_mu_ = std::make_unique<std::mutex>();
    // From here SSL_read and SSL_write never wait on the socket, so neither holds ssl_mu_
    // through a wait; poll() does the waiting.
    ::fcntl(c->fd_, F_SETFL, ::fcntl(c->fd_, F_GETFL) | O_NONBLOCK);
  }
  if (!sec.token.empty()) {
    auto now = sec.token_file.empty() ? proto::result<std::string>{sec.token}
                                      : read_secret_file(sec.token_file, "token file");
    auto proven = authenticate(*c, now ? *now : sec.token, timeout, c->binding_);
    if (now) proto::wipe(*now);
    if (!proven) return proven.err();
  }
  return c;
}

proto::result<connection> connection::open(const std::string& host, uint16_t port,
                                           int receive_buffer) {
  std::string why;
  int fd = tls::dial_tcp(host, port, 10000, &why, -1, receive_buffer);
  if (fd < 0)
    return error{err_code::io,
                 "cannot connect to " + host + ":" + std::to_string(port) + ": " + why};
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // this client blocks, with poll()
  connection c;
  c.fd_ = fd;
  return c;
}

bool connection::send_raw(const proto::bytes& b) {
  size_t off = 0;
  if (ssl_ != nullptr) {
    while (off < b.size()) {
      int n = 0, e = SSL_ERROR_NONE;
      {
        std::lock_guard lk{*ssl_mu_};
        n = SSL_write(ssl_, b.data() + off, static_cast<int>(b.size() - off));
        if (n <= 0) e = SSL_get_error(ssl_, n);
      }
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (e != SSL_ERROR_WANT_WRITE && e != SSL_ERROR_WANT_READ) return false;
      // Retried with the same bytes (as OpenSSL asks) once the socket can take more; a
      // bounded wait, since the reading thread may take what a WANT_READ waits for.
      pollfd p{fd_, static_cast<short>(e == SSL_ERROR_WANT_WRITE ? POLLOUT : POLLIN), 0};
      if (::poll(&p, 1, 10) < 0 && errno != EINTR) return false;
    }
    return true;
  }
  while (off < b.size()) {
    ssize_t n = ::send(fd_, b.data() + off, b.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

bool connection::send(const proto::any_message& m) {
  return send_raw(proto::encode(m));
}

proto::result<proto::any_message> connection::receive(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  timed_out_ = false;
  for (;;) {
    auto f = decoder_.next();
    if (!f) return f.err();
    if (*f) {
      framed_any_ = true;
      return proto::decode_response((*f)->kind, (*f)->body);
    }
    if (closed_) return error{err_code::io, "connection closed by the server"};
    // Past the deadline the socket is still looked at once (receive(0ms) takes what has come).
    auto left = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(
                                         deadline - std::chrono::steady_clock::now())
                                         .count());
    auto got = read_some(static_cast<int>(left));
    if (!got) return got.err();
    if (!*got) {
      timed_out_ = true;
      return error{err_code::io, "timed out"};
    }
  }
}

proto::result<bool> connection::tls_read(uint8_t* buf, size_t size) {
  std::unique_lock lk{*ssl_mu_};
  int n = SSL_read(ssl_, buf, static_cast<int>(size));
  if (n > 0) {
    received_any_ = true;
    decoder_.feed(buf, static_cast<size_t>(n));
    return true;
  }
  int e = SSL_get_error(ssl_, n);
  if (e == SSL_ERROR_WANT_READ) return true;  // a partial record: poll() waits for the rest
  if (e == SSL_ERROR_WANT_WRITE) {            // it must send first: wait until it can, unlocked
    lk.unlock();
    pollfd p{fd_, POLLOUT, 0};
    (void)::poll(&p, 1, 10);
    return true;
  }
  closed_ = true;
  if (e == SSL_ERROR_ZERO_RETURN) return true;
  auto why = tls::failure(ssl_, n, true);
  if (why.find("closed during the TLS exchange") != std::string::npos) return true;
  return error{err_code::unauthorized, "TLS: " + why};
}

proto::result<bool> connection::read_some(int left_ms) {
  uint8_t buf[64 * 1024];
  for (;;) {
    // Bytes OpenSSL has decrypted already are not on the socket: take them without waiting.
    bool pending = false;
    if (ssl_ != nullptr) {
      std::lock_guard lk{*ssl_mu_};
      pending = SSL_pending(ssl_) > 0;
    }
    if (!pending) {
      pollfd p{fd_, POLLIN, 0};
      int rc = ::poll(&p, 1, left_ms);
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) return false;
    }
    if (ssl_ != nullptr) return tls_read(buf, sizeof(buf));
    ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      closed_ = true;
    } else {
      received_any_ = true;
      decoder_.feed(buf, static_cast<size_t>(n));
    }
    return true;
  }
}

namespace {

/// The answer `r` as a T, an ERR as its error, anything else as bad_body naming what came.
template <class T>
proto::result<T> expect(proto::result<proto::any_message> r, const char* want) {
  if (!r) return r.err();
  if (auto* m = std::get_if<T>(&*r)) return std::move(*m);
  if (auto* e = std::get_if<proto::err>(&*r))
    return error{static_cast<err_code>(e->code), e->message};
  return error{err_code::bad_body, std::string{"expected "} + want + ", got " +
                                       proto::kind_name(static_cast<uint8_t>(proto::kind_of(*r)))};
}

}  // namespace

proto::result<proto::any_message> first_answer(connection& c, const char* to,
                                               std::chrono::milliseconds timeout,
                                               const std::atomic<bool>* stop) {
  using namespace std::chrono_literals;
  constexpr auto slice = 100ms;
  auto until = std::chrono::steady_clock::now() + timeout;
  auto r = c.receive(stop ? std::min(timeout, slice) : timeout);
  for (; stop && !r && c.timed_out();) {
    if (stop->load())
      return error{err_code::io, std::string{"stopped while waiting for the answer to "} + to};
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - std::chrono::steady_clock::now());
    if (left <= 0ms) break;
    r = c.receive(std::min(left, slice));
  }
  const std::string port = "the server's port for workers and clients (`listen`, listen= in its "
                           "ready file)";
  // The first bytes are no frame (bad magic before any frame came; a bad checksum is a Fusee
  // frame gone wrong): unless they said what they are (HTTP), another listener's.
  if (!r && r.err().code == err_code::bad_frame && !c.framed_any() &&
      r.err().message.starts_with("bad magic") && r.err().message.find("HTTP") == std::string::npos)
    return error{err_code::bad_frame,
                 r.err().message + "; the answer to " + to + " is not Fusee's protocol: is this " +
                     port +
                     ", not another of its listeners (inspect_listen and cluster_listen speak "
                     "CAF's)?"};
  // Only silence and a plain close before any byte: a TLS alert, a bad frame or an earlier frame
  // (AUTH's) says more than a guess would.
  if (r || c.received_any() || !(c.timed_out() || (c.closed() && r.err().code == err_code::io)))
    return r;
  if (c.timed_out())
    return error{err_code::io, std::string{"no answer to "} + to + " in " +
                                   std::to_string(timeout.count()) +
                                   " ms: a Fusee server answers at once unless it is very busy, "
                                   "an HTTP listener (its HTTP API's or admin port) never does: "
                                   "is this " +
                                   port + "?"};
  return error{err_code::io, std::string{"the connection was closed without an answer to "} + to +
                                 ": the server refused it (over a connection limit: its log says "
                                 "so), or this is not " +
                                 port};
}

proto::result<authenticated> authenticate(connection& c, std::string_view secret,
                                          std::chrono::milliseconds timeout,
                                          proto::byte_view binding) {
  auto mine = proto::fresh_nonce();
  if (!c.send(proto::auth_hello{proto::request_head{1}, 1, mine}))
    return error{err_code::io, "send failed"};
  auto challenge =
      expect<proto::auth_challenge>(first_answer(c, "AUTH", timeout), "AUTH_CHALLENGE");
  if (!challenge && challenge.err().code == err_code::unknown_kind)
    return error{err_code::unauthorized,
                 "the server takes no tokens (it does not know AUTH): connect without one, or "
                 "give the server [[token]] tables"};
  if (!challenge) return challenge.err();
  auto proof = proto::auth_proof(secret, proto::auth_side::client, mine, challenge->nonce, binding);
  if (!c.send(
          proto::auth_response{proto::request_head{2}, proto::bytes(proof.begin(), proof.end())}))
    return error{err_code::io, "send failed"};
  auto ok = expect<proto::auth_ok>(c.receive(timeout), "AUTH_OK");
  if (!ok) return ok.err();
  auto theirs =
      proto::auth_proof(secret, proto::auth_side::server, mine, challenge->nonce, binding);
  auto sc = proto::scope_of_byte(ok->scope);
  if (!proto::same_bytes(theirs, ok->proof) || !sc)
    return error{err_code::unauthorized,
                 "the server's proof does not match this token: it is not a server that holds "
                 "it (check the address and the token file)"};
  return authenticated{*sc, std::move(ok->token)};
}

proto::result<uint32_t> client_hello(connection& c, const std::string& name,
                                     std::chrono::milliseconds timeout) {
  if (!c.send(proto::client_hello{proto::request_head{1}, proto::protocol_version, name}))
    return error{err_code::io, "send failed"};
  auto r = first_answer(c, "CLIENT_HELLO", timeout);
  if (!r) return r.err();
  if (auto* e = std::get_if<proto::err>(&*r))
    return error{static_cast<err_code>(e->code), e->message};
  auto* ok = std::get_if<proto::ok>(&*r);
  auto count = ok ? proto::client_hello_shard_count(*ok) : std::nullopt;
  if (!count)
    return error{err_code::bad_body,
                 "the server answered CLIENT_HELLO with " +
                     proto::kind_name(static_cast<uint8_t>(proto::kind_of(*r)))};
  return *count;
}

bool send_hello(connection& c, uint32_t offers, uint32_t max_shards, const std::string& name,
                proto::invocation_id invocation, std::vector<std::string> types) {
  proto::hello h;
  h.head.id = 1;
  h.offers = offers;
  h.max_shards = max_shards;
  h.name = name;
  h.invocation = invocation;
  h.types = std::move(types);
  return c.send(h);
}

proto::result<proto::lease> lease_of(proto::result<proto::any_message> r) {
  return expect<proto::lease>(std::move(r), "LEASE");
}

proto::result<proto::lease> hello(connection& c, uint32_t offers, uint32_t max_shards,
                                  const std::string& name, std::chrono::milliseconds timeout,
                                  proto::invocation_id invocation, std::vector<std::string> types) {
  if (!send_hello(c, offers, max_shards, name, invocation, std::move(types)))
    return error{err_code::io, "send failed"};
  return lease_of(first_answer(c, "HELLO", timeout));
}

}  // namespace fusee::client
