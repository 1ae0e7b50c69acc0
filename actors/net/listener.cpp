#include "actors/net/listener.hpp"

#include "actors/net/connection_limits.hpp"
#include "logging/logging.hpp"
#include "protocol/messages.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fusee::server {

std::unique_ptr<listener> listener::start(caf::actor_system& sys, const std::string& host,
                                          uint16_t port, session_context ctx, std::string* err,
                                          tls::ctx_ptr tls) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    *err = "cannot resolve listen host " + host + ": " + gai_strerror(rc);
    return nullptr;
  }
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  bool ok = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 1024) == 0;
  ::freeaddrinfo(res);
  if (!ok) {
    *err = "cannot listen on " + host + ":" + port_text + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return nullptr;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<listener> l{new listener};
  l->fd_ = fd;
  l->port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  l->limits_ = ctx.limits;
  l->sys_ = &sys;
  l->ctx_ = ctx;
  auto handshake_timeout = ctx.settings->hello_timeout_ms;
  if (tls) {
    tls::terminator::options o;
    o.ctx = std::move(tls);
    o.handshake_timeout_ms = handshake_timeout;
    o.plaintext_answer = [] {
      auto f = proto::encode(proto::make_err(
          0, proto::error{proto::err_code::unauthorized,
                          "this listener speaks TLS 1.3: connect with TLS (--ca-file, or "
                          "FUSEE_TLS_CA_FILE)"}));
      return std::string(f.begin(), f.end());
    }();
    auto limits = l->limits_;
    // After stop() returns no session starts (the check and the start hold stop()'s lock, so
    // the owner's ERR SHUTTING_DOWN to every session misses none): a handshake that ends then
    // is closed and released. The terminator itself lives on until the listener does, so the
    // sessions' last frames still reach their TLS peers.
    auto* raw = l.get();
    o.deliver = [raw, limits](tls::handed_over h) {
      std::lock_guard<std::mutex> lk{raw->mtx_};
      if (raw->stopping_) {
        ::close(h.fd);
        if (limits) limits->release(h.peer_ip);
        return;
      }
      start_session(*raw->sys_, h.fd,
                    peer_info{std::move(h.peer_ip), std::move(h.peer), std::move(h.binding)},
                    raw->ctx_);
    };
    o.dropped = [limits](const std::string& ip) {
      if (limits) limits->release(ip);
    };
    o.what = "workers";
    l->tls_ = tls::terminator::start(std::move(o));
  }
  auto* raw = l.get();
  l->thread_ = std::thread([raw] { raw->accept_loop(); });
  return l;
}

void listener::accept_loop() {
  // Out of descriptors (EMFILE/ENFILE), the pending connection stays in the backlog and accept
  // fails again at once: back off (10 ms doubling to 1 s) instead of spinning, say so once, and
  // keep serving the connections that are open.
  // A session needs two descriptors (the socket and its lane's duplicate, out_lane.hpp): the
  // second is reserved before a connection is accepted, so one is never accepted that could not
  // be answered.
  std::chrono::milliseconds backoff{0};
  int failed_in_a_row = 0;  // connections lost to their own errors, one after the other
  int spare = -1;
  struct closer {
    int& fd;
    ~closer() {
      if (fd >= 0) ::close(fd);
    }
  } spare_closer{spare};
  for (;;) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    if (spare < 0 && !tls_) spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    int c = spare < 0 && !tls_ ? -1
                               : ::accept4(fd_, reinterpret_cast<sockaddr*>(&from), &from_len,
                                           SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (c < 0) {
      // Errors of the connection being accepted (accept(2): Linux passes pending network errors
      // on): that connection is lost, the next one is not. Should they persist (a firewall
      // refusing every one with EPERM, say), a short pause keeps the loop from spinning.
      if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO || errno == ENETDOWN ||
          errno == ENOPROTOOPT || errno == EHOSTDOWN || errno == ENONET || errno == EHOSTUNREACH ||
          errno == EOPNOTSUPP || errno == ENETUNREACH || errno == EPERM) {
        if (++failed_in_a_row >= 100 && !pause(std::chrono::milliseconds(10))) return;
        continue;
      }
      if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) {
        bool stopping;
        {
          std::lock_guard<std::mutex> lk{mtx_};
          stopping = stopping_;
        }
        if (!stopping)  // not our own shutdown of the socket
          spdlog::error("accepting connections failed for good: {}", std::strerror(errno));
        return;
      }
      if (backoff.count() == 0)
        spdlog::error("cannot accept connections: {}; new connections wait until descriptors "
                      "are free (raise the limit: ulimit -n, LimitNOFILE=)",
                      std::strerror(errno));
      backoff = std::min<std::chrono::milliseconds>(
          std::max<std::chrono::milliseconds>(2 * backoff, std::chrono::milliseconds(10)),
          std::chrono::seconds(1));
      if (!pause(backoff)) {
        return;
      }
      continue;
    }
    if (backoff.count() != 0) {
      spdlog::info("accepting connections again");
      backoff = std::chrono::milliseconds(0);
    }
    failed_in_a_row = 0;
    int on = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &on, sizeof(on));
    char host[NI_MAXHOST] = "unknown";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&from), from_len, host, sizeof(host), nullptr, 0,
                  NI_NUMERICHOST);
    if (limits_)
      if (auto refused = limits_->admit(host)) {
        refuse(c, host, *refused);
        continue;
      }
    if (tls_) {
      char port[NI_MAXSERV] = "0";
      ::getnameinfo(reinterpret_cast<sockaddr*>(&from), from_len, nullptr, 0, port, sizeof(port),
                    NI_NUMERICSERV);
      tls_->add(c, std::string{host} + ":" + port, host);
      continue;
    }
    start_session(*sys_, c, peer_info{std::string{host}, std::string{}, proto::bytes{}}, ctx_,
                  spare);
    spare = -1;  // taken by the session's lane
  }
}

void listener::refuse(int fd, const std::string& peer, const std::string& why) {
  // One small frame into an empty socket buffer: it fits, so the send does not block.
  auto frame = proto::encode(proto::make_err(0, proto::error{proto::err_code::too_large, why}));
  (void)!::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  ::close(fd);
  auto now = std::chrono::steady_clock::now();
  if (now - last_refusal_log_ >= std::chrono::seconds(1)) {  // a flood logs once a second
    last_refusal_log_ = now;
    spdlog::warn("refused a connection: {} peer={}", why, peer);
  }
}

bool listener::pause(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lk{mtx_};
  return !cv_.wait_for(lk, d, [this] { return stopping_; });
}

void listener::stop() {
  {
    std::lock_guard<std::mutex> lk{mtx_};
    stopping_ = true;
  }
  cv_.notify_all();
  if (fd_ >= 0) {
    ::shutdown(fd_, SHUT_RDWR);
    if (thread_.joinable()) thread_.join();
    ::close(fd_);
    fd_ = -1;
  }
}

listener::~listener() {
  stop();
}

}  // namespace fusee::server
