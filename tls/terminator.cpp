#include "tls/terminator.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <unordered_map>
#include <utility>

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <spdlog/spdlog.h>

namespace fusee::tls {

namespace {

using clock_type = std::chrono::steady_clock;

void nonblocking(int fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

}  // namespace

std::string unmapped(const std::string& ip) {
  // An IPv4 peer of a dual-stack (IPv6) listener: ::ffff:a.b.c.d
  if (ip.size() > 7 && (ip.compare(0, 7, "::ffff:") == 0 || ip.compare(0, 7, "::FFFF:") == 0) &&
      ip.find('.') != std::string::npos)
    return ip.substr(7);
  return ip;
}

struct terminator::conn {
  int tcp = -1;        ///< the peer's side (TLS, unless the terminator only relays)
  int plain = -1;      ///< our end of the socketpair (-1 until the handshake is done)
  SSL* ssl = nullptr;  ///< null when relaying
  std::string peer, peer_ip;
  clock_type::time_point started;
  bool checked = false;  ///< the first byte was looked at (TLS or not)
  /// Refused (plaintext peer, failed handshake): our last bytes are sent and the write side
  /// shut; what the peer still sends is read and dropped until it closes (or `drain_until`),
  /// so close() sends no RST that could destroy our answer before the peer reads it.
  bool draining = false;
  clock_type::time_point drain_until{};
  /// When the TLS side last took bytes of to_tls (or to_tls last filled from empty).
  clock_type::time_point sent{};
  bool outbound = false;  ///< this side dialled: client handshake, `plain` given up front
  int known = -1;         ///< inbound from a known peer: the index of its places
  /// Relayed (no TLS), inbound: its peer has sent nothing yet, which counts as a handshake.
  bool silent = false;
  std::string server_name;  ///< outbound: the name the far side's certificate must carry
  bool open = false;        ///< handshake done, plaintext end handed over
  bool tls_eof = false;     ///< the TLS peer closed: nothing more to decrypt
  bool plain_eof = false;   ///< the plaintext side closed: nothing more to encrypt
  proto::bytes to_plain;    ///< decrypted, not yet written to `plain`
  proto::bytes to_tls;      ///< read from `plain`, not yet taken by SSL_write
  ~conn() {
    if (ssl != nullptr) SSL_free(ssl);
    if (tcp >= 0) ::close(tcp);
    if (plain >= 0) ::close(plain);
  }
};

namespace {

/// A nonblocking recv() or send() on a plain socket, retried after EINTR, in peer_read()'s and
/// peer_write()'s terms: the bytes moved (> 0), 0 when it would block, -1 when closed or failed.
template <class Io>
int plain_io(Io io) {
  for (;;) {
    ssize_t n = io();
    if (n > 0) return static_cast<int>(n);
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
  }
}

/// Reads the peer's side (TLS, or plain when relaying): the bytes read (> 0), 0 when none are
/// there yet, -1 when it closed or failed.
int peer_read(terminator::conn& c, uint8_t* buf, int len, const std::string& what) {
  if (c.ssl == nullptr)
    return plain_io([&] { return ::recv(c.tcp, buf, static_cast<size_t>(len), 0); });
  int n = SSL_read(c.ssl, buf, len);
  if (n > 0) return n;
  int e = SSL_get_error(c.ssl, n);
  if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
  if (e != SSL_ERROR_ZERO_RETURN && e != SSL_ERROR_SYSCALL)
    spdlog::debug("TLS read ended listener={} peer={}: {}", what, c.peer, failure(c.ssl, n, false));
  ERR_clear_error();
  return -1;
}

/// Writes to the peer's side: the bytes it took (> 0), 0 when it takes none now, -1 when it is
/// gone. (OpenSSL takes all of `buf` or nothing, and wants the same bytes again after a 0.)
int peer_write(terminator::conn& c, const uint8_t* buf, int len) {
  if (c.ssl == nullptr)
    return plain_io([&] { return ::send(c.tcp, buf, static_cast<size_t>(len), MSG_NOSIGNAL); });
  int n = SSL_write(c.ssl, buf, len);
  if (n > 0) return n;
  int e = SSL_get_error(c.ssl, n);
  if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) return 0;
  ERR_clear_error();
  return -1;
}

}  // namespace

void drain(terminator::conn& c) {
  ::shutdown(c.tcp, SHUT_WR);  // after the alert or the plaintext answer
  c.draining = true;
  c.drain_until = clock_type::now() + std::chrono::seconds(2);
}

void terminator::options::add_known(const std::vector<std::string>& addresses, uint32_t places) {
  if (addresses.empty()) return;  // nothing could take its places
  // The peers these addresses already belong to merge into the first of them (or a new one).
  std::vector<uint32_t> peers;
  for (auto& a : addresses)
    if (auto at = known_peers.find(unmapped(a)); at != known_peers.end())
      peers.push_back(at->second);
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  auto into = peers.empty() ? static_cast<uint32_t>(known_places.size()) : peers.front();
  if (peers.empty()) known_places.push_back(0);
  for (size_t k = 1; k < peers.size(); ++k) {
    known_places[into] += std::exchange(known_places[peers[k]], 0);
    for (auto& [ip, peer] : known_peers)
      if (peer == peers[k]) peer = into;
  }
  known_places[into] += places;
  for (auto& a : addresses)
    known_peers[unmapped(a)] = into;
}

std::unique_ptr<terminator> terminator::start(options o) {
  std::unique_ptr<terminator> t{new terminator};
  t->o_ = std::move(o);
  t->known_open_.assign(t->o_.known_places.size(), 0);
  t->epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  t->wake_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = nullptr;  // the wake-up descriptor
  ::epoll_ctl(t->epoll_, EPOLL_CTL_ADD, t->wake_, &ev);
  t->thread_ = std::thread([raw = t.get()] { raw->run(); });
  return t;
}

terminator::~terminator() {
  {
    std::lock_guard lk{mu_};
    stopping_ = true;
  }
  uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(wake_);
  ::close(epoll_);
}

void terminator::enqueue(std::unique_ptr<conn> c) {
  c->started = clock_type::now();
  {
    std::lock_guard lk{mu_};
    incoming_.push_back(std::move(c));
  }
  uint64_t one = 1;
  (void)!::write(wake_, &one, sizeof(one));
}

void terminator::add_outbound(int tcp, int plain, std::string peer, std::string server_name) {
  auto c = std::make_unique<conn>();
  c->tcp = tcp;
  c->plain = plain;
  c->outbound = true;
  c->checked = true;
  c->peer = std::move(peer);
  c->server_name = std::move(server_name);
  enqueue(std::move(c));
}

void terminator::add(int fd, std::string peer, std::string peer_ip) {
  // Checked here, before the socket waits for the thread: a flood must not queue descriptors.
  std::string over, key = o_.what + "full";
  int known = -1;
  uint32_t places = 0;
  bool placed = take_place(peer_ip, known, places);
  if (!placed) {
    if (known < 0) {
      over = std::to_string(o_.max_connections) + " connections are open (" + o_.limit_name + ")";
    } else {
      over = std::to_string(places) + " connections from " + peer_ip + "'s peer are open (" +
             o_.known_limit_name + ")";
      key += "known" + peer_ip;
    }
  } else if (o_.max_per_peer != 0) {
    std::lock_guard lk{per_peer_mu_};
    auto& mine = per_peer_[peer_ip];
    if (mine >= o_.max_per_peer) {
      over = std::to_string(mine) +
             (o_.ctx ? " handshakes from " + peer_ip + " are going on"
                     : " connections from " + peer_ip + " have sent nothing yet");
      key += peer_ip;
    } else {
      ++mine;
    }
  }
  if (!over.empty()) {
    if (placed) give_place(known);  // refused for max_per_peer
    refused_++;                     // counted before the peer can see the close
    ::close(fd);                    // before any byte: the peer may try again later
    say(key, over + ": new ones are closed as they come" +
                 (o_.ctx ? ", before their handshake" : "") + " listener=" + o_.what +
                 " peer=" + peer);
    if (o_.dropped) o_.dropped(peer_ip);
    return;
  }
  auto c = std::make_unique<conn>();
  c->tcp = fd;
  c->known = known;
  c->peer = std::move(peer);
  c->peer_ip = std::move(peer_ip);
  enqueue(std::move(c));
}

bool terminator::take_place(const std::string& peer_ip, int& known, uint32_t& places) {
  {
    std::lock_guard lk{per_peer_mu_};
    if (auto at = o_.known_peers.find(unmapped(peer_ip)); at != o_.known_peers.end()) {
      known = static_cast<int>(at->second);
      places = o_.known_places[at->second];
      if (known_open_[at->second] >= places) return false;
      ++known_open_[at->second];
      return true;
    }
  }
  known = -1;
  places = o_.max_connections;
  if (inbound_.fetch_add(1) < o_.max_connections || o_.max_connections == 0) return true;
  --inbound_;
  return false;
}

bool terminator::knows(const std::string& ip) const {
  std::lock_guard lk{per_peer_mu_};
  return o_.known_peers.count(unmapped(ip)) != 0;
}

std::optional<uint32_t> terminator::peer_of(const std::string& ip) const {
  std::lock_guard lk{per_peer_mu_};
  if (auto at = o_.known_peers.find(unmapped(ip)); at != o_.known_peers.end()) return at->second;
  return std::nullopt;
}

std::vector<std::string> terminator::assign(const std::vector<std::string>& addresses,
                                            std::optional<uint32_t>& peer, uint32_t places) {
  std::vector<std::string> assigned;
  std::lock_guard lk{per_peer_mu_};
  for (auto& a : addresses) {
    auto ip = unmapped(a);
    if (auto at = o_.known_peers.find(ip); at != o_.known_peers.end() && peer == at->second)
      continue;
    if (!peer) {  // a peer none of whose addresses was known (its host did not resolve)
      peer = static_cast<uint32_t>(o_.known_places.size());
      o_.known_places.push_back(places);
      known_open_.push_back(0);
    }
    o_.known_peers[ip] = *peer;
    assigned.push_back(ip);
  }
  return assigned;
}

std::vector<std::string> terminator::forget(const std::vector<std::string>& gone) {
  std::vector<std::string> forgotten;
  std::lock_guard lk{per_peer_mu_};
  for (auto& a : gone)
    if (o_.known_peers.erase(unmapped(a)) != 0) forgotten.push_back(unmapped(a));
  return forgotten;
}

void terminator::give_place(int known) {
  if (known < 0) {
    --inbound_;
    return;
  }
  std::lock_guard lk{per_peer_mu_};
  --known_open_[static_cast<size_t>(known)];
}

void terminator::handshake_ended(conn& c) {
  if (o_.max_per_peer == 0) return;  // its place under max_per_peer, which counts handshakes
  std::lock_guard lk{per_peer_mu_};
  if (auto at = per_peer_.find(c.peer_ip); at != per_peer_.end() && --at->second == 0)
    per_peer_.erase(at);
}

void terminator::drop(conn& c, bool delivered) {
  if (!delivered && !c.outbound && o_.dropped) o_.dropped(c.peer_ip);
  if (!c.outbound) give_place(c.known);
  if (!c.outbound && (!c.open || c.silent)) handshake_ended(c);
  ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.tcp, nullptr);
  if (c.plain >= 0) ::epoll_ctl(epoll_, EPOLL_CTL_DEL, c.plain, nullptr);
}

void terminator::say(const std::string& key, const std::string& line) {
  // A peer that keeps failing the same way (a node with the wrong certificate redials every
  // second or two) is logged once a minute; the rest at debug.
  said_.warn(key, line);
}

/// Ends a refused connection politely (see conn::draining).
void drain(terminator::conn& c);

bool terminator::handshake(conn& c) {
  // A peer that speaks the plain protocol (or HTTP) gets an answer it can read.
  uint8_t first = 0x16;
  if (!c.checked) {
    ssize_t n = ::recv(c.tcp, &first, 1, MSG_PEEK);
    if (n == 0) {  // closed before its first byte (a reachability probe): nothing to say
      c.tls_eof = c.plain_eof = true;
      return false;
    }
    if (n < 0) return false;  // nothing yet: the next byte brings the next event
    c.checked = true;
  }
  if (first != 0x16) {  // 0x16: a TLS handshake record, as every ClientHello starts
    plaintext_++;
    (void)!::send(c.tcp, o_.plaintext_answer.data(), o_.plaintext_answer.size(),
                  MSG_NOSIGNAL | MSG_DONTWAIT);
    say(c.peer_ip,
        "refused a connection that does not speak TLS listener=" + o_.what + " peer=" + c.peer);
    drain(c);
    return false;
  }
  int r = SSL_do_handshake(c.ssl);
  if (r != 1) {
    int e = SSL_get_error(c.ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return false;
    failures_++;
    auto why = failure(c.ssl, r, c.outbound);
    say((c.outbound ? c.peer : c.peer_ip) + why, std::string{"TLS handshake failed "} +
                                                     (c.outbound ? "dialling=" : "listener=") +
                                                     o_.what + " peer=" + c.peer + ": " + why);
    drain(c);
    return false;
  }
  if (!c.outbound && !o_.peer_names.empty() && !peer_named(c.ssl, o_.peer_names)) {
    failures_++;
    say(c.peer_ip + "names",
        "TLS handshake refused listener=" + o_.what + " peer=" + c.peer +
            ": the client's certificate names none of the expected peers (the cluster map's "
            "node addresses)");
    drain(c);
    return false;
  }
  return true;
}

void terminator::pump(conn& c) {
  if (c.draining) {
    uint8_t sink[4096];
    for (;;) {
      ssize_t n = ::recv(c.tcp, sink, sizeof(sink), 0);
      if (n > 0) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
      c.tls_eof = c.plain_eof = true;  // the peer closed (or reset): done
      return;
    }
  }
  if (!c.open) {
    if (c.ssl != nullptr && !handshake(c)) return;
    int given = -1;  // the end handed to deliver()
    if (c.plain < 0 && o_.open_plain) {
      std::string why;
      c.plain = o_.open_plain(&why);
      if (c.plain < 0) {
        say("open_plain", "could not open the plaintext side of a connection (" + why +
                              "), closing it listener=" + o_.what + " peer=" + c.peer);
        c.tls_eof = c.plain_eof = true;
        return;
      }
    } else if (c.plain < 0) {
      int pair[2];
      if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, pair) != 0) {
        spdlog::error("socketpair failed listener={}: {}", o_.what, std::strerror(errno));
        c.tls_eof = c.plain_eof = true;
        return;
      }
      c.plain = pair[0];
      given = pair[1];
    }
    nonblocking(c.plain);
    if (!c.outbound && c.ssl != nullptr) handshake_ended(c);
    c.silent = !c.outbound && c.ssl == nullptr;  // relayed: until its first byte
    c.open = true;
    if (c.ssl != nullptr) handshakes_++;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP;
    ev.data.ptr = &c;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c.plain, &ev);
    if (given >= 0)
      o_.deliver(handed_over{given, c.peer, c.peer_ip,
                             c.ssl != nullptr ? exporter(c.ssl) : proto::bytes{}});
  }
  uint8_t buf[16 * 1024];
  // The peer's side → plaintext.
  for (;;) {
    if (!c.to_plain.empty()) {
      ssize_t n = ::send(c.plain, c.to_plain.data(), c.to_plain.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n < 0) {  // the plaintext side is gone
        c.tls_eof = c.plain_eof = true;
        return;
      }
      c.to_plain.erase(c.to_plain.begin(), c.to_plain.begin() + n);
      continue;
    }
    if (c.tls_eof) {
      ::shutdown(c.plain, SHUT_WR);
      break;
    }
    int n = peer_read(c, buf, sizeof(buf), o_.what);
    if (n > 0) {
      if (c.silent) {
        c.silent = false;
        handshake_ended(c);
      }
      c.to_plain.insert(c.to_plain.end(), buf, buf + n);  // written out before more is read
      continue;
    }
    if (n == 0) break;
    c.tls_eof = true;
  }
  // Plaintext → the peer's side.
  for (;;) {
    if (!c.to_tls.empty()) {
      int n = peer_write(c, c.to_tls.data(), static_cast<int>(c.to_tls.size()));
      if (n > 0) {
        c.sent = clock_type::now();
        c.to_tls.erase(c.to_tls.begin(), c.to_tls.begin() + n);
        continue;
      }
      if (n == 0) break;
      c.tls_eof = c.plain_eof = true;  // the peer is gone
      return;
    }
    if (c.plain_eof) break;
    ssize_t n = ::recv(c.plain, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      c.plain_eof = true;
      if (c.ssl != nullptr) {
        SSL_shutdown(c.ssl);
      } else {
        ::shutdown(c.tcp, SHUT_WR);
      }
      break;
    }
    if (c.to_tls.empty()) c.sent = clock_type::now();  // the stall is counted from here
    c.to_tls.insert(c.to_tls.end(), buf, buf + n);     // taken by SSL_write before more is read
  }
}

void terminator::run() {
  std::unordered_map<conn*, std::unique_ptr<conn>> conns;
  epoll_event events[64];
  for (;;) {
    int n = ::epoll_wait(epoll_, events, 64, 250);
    std::vector<conn*> touched;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.ptr == nullptr) {
        uint64_t v;
        (void)!::read(wake_, &v, sizeof(v));
        std::vector<std::unique_ptr<conn>> fresh;
        {
          std::lock_guard lk{mu_};
          if (stopping_) {  // what will never be delivered releases its place
            for (auto& [p, c] : conns)
              if (!c->open && !c->outbound && o_.dropped) o_.dropped(c->peer_ip);
            for (auto& c : incoming_)
              if (!c->outbound && o_.dropped) o_.dropped(c->peer_ip);
            return;
          }
          fresh.swap(incoming_);
        }
        for (auto& c : fresh) {
          nonblocking(c->tcp);
          if (c->outbound) {
            c->ssl = SSL_new(o_.client_ctx.get());
            expect_peer_name(c->ssl, c->server_name);
            SSL_set_connect_state(c->ssl);
          } else if (o_.ctx) {
            c->ssl = SSL_new(o_.ctx.get());
            SSL_set_accept_state(c->ssl);
          }  // else relayed as it is
          if (c->ssl != nullptr) SSL_set_fd(c->ssl, c->tcp);
          epoll_event ev{};
          ev.events = EPOLLIN | EPOLLOUT | EPOLLET | EPOLLRDHUP;
          ev.data.ptr = c.get();
          ::epoll_ctl(epoll_, EPOLL_CTL_ADD, c->tcp, &ev);
          touched.push_back(c.get());
          conns.emplace(c.get(), std::move(c));
        }
        continue;
      }
      touched.push_back(static_cast<conn*>(events[i].data.ptr));
    }
    auto now = clock_type::now();
    for (auto& [p, c] : conns)  // refused peers that do not close
      if (c->draining && !c->tls_eof && now >= c->drain_until) {
        c->tls_eof = c->plain_eof = true;
        touched.push_back(p);
      }
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (auto* p : touched) {
      auto it = conns.find(p);
      if (it == conns.end()) continue;
      auto& c = *it->second;
      if (!(c.tls_eof && c.plain_eof)) pump(c);
      // Done when nothing more can move: both sides closed, or the plaintext side closed and
      // all it said went out.
      bool done = (c.tls_eof && c.plain_eof) || (c.plain_eof && c.to_tls.empty());
      if (done) {
        drop(c, c.open);
        conns.erase(it);
      }
    }
    // Handshakes (relayed: first bytes) that take too long, looked at after this turn's bytes
    // were read: one whose awaited bytes just came is not cut, one that trickles bytes is.
    for (auto it = conns.begin(); it != conns.end();) {
      auto& c = *it->second;
      bool waiting = !c.open || c.silent;  // for its handshake, or (relayed) its first byte
      if (!waiting || c.tls_eof || c.draining ||
          now - c.started < std::chrono::milliseconds(o_.handshake_timeout_ms)) {
        ++it;
        continue;
      }
      timeouts_++;
      say(c.peer_ip + "timeout", std::string{c.silent ? "nothing sent" : "TLS handshake not done"} +
                                     " within " + std::to_string(o_.handshake_timeout_ms) +
                                     " ms, closing listener=" + o_.what + " peer=" + c.peer);
      drop(c, c.open);
      it = conns.erase(it);
    }
    // A TLS peer that took none of what waits for it for stalled_peer_ms (looked at after this
    // turn's events, so one that just read is not cut, whether or not it closed its side): reset.
    for (auto it = conns.begin(); it != conns.end();) {
      auto& c = *it->second;
      if (!c.open || c.to_tls.empty() || (c.tls_eof && c.plain_eof) ||
          now - c.sent < std::chrono::milliseconds(o_.stalled_peer_ms)) {
        ++it;
        continue;
      }
      stalled_++;
      say(c.peer_ip + "stalled",
          std::string{c.ssl != nullptr ? "closed a TLS peer" : "closed a peer"} +
              " that took nothing of what waits for it for " + std::to_string(o_.stalled_peer_ms) +
              " ms listener=" + o_.what + " peer=" + c.peer);
      linger reset{1, 0};  // a reset: the kernel does not keep probing a peer that reads nothing
      ::setsockopt(c.tcp, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
      drop(c, true);
      it = conns.erase(it);
    }
  }
}

}  // namespace fusee::tls
