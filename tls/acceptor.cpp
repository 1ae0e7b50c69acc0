#include "tls/acceptor.hpp"

#include <cassert>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <system_error>

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

namespace fusee::tls {

proto::result<std::unique_ptr<acceptor>> acceptor::start(const std::string& host, uint16_t port,
                                                         terminator& to) {
  auto a = bind(host, port);
  if (!a) return a;
  if (auto r = (*a)->hand_to(to); !r) return r.err();
  return a;
}

proto::result<void> acceptor::hand_to(terminator& to) {
  assert(!thread_.joinable());  // once
  to_ = &to;
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    return proto::error{proto::err_code::io, "cannot start the thread accepting on port " +
                                                 std::to_string(port_) + ": " + e.what()};
  }
  return {};
}

proto::result<std::unique_ptr<acceptor>> acceptor::bind(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  auto where = host + ":" + std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return proto::error{proto::err_code::io, "cannot resolve " + host + ": " + gai_strerror(rc)};
  int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  bool ok = fd >= 0 && ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) == 0 &&
            ::bind(fd, res->ai_addr, res->ai_addrlen) == 0 && ::listen(fd, 128) == 0;
  ::freeaddrinfo(res);
  if (!ok) {
    auto why = std::string{std::strerror(errno)};
    if (fd >= 0) ::close(fd);
    return proto::error{proto::err_code::io, "cannot listen on " + where + ": " + why};
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::unique_ptr<acceptor> a{new acceptor};
  a->fd_ = fd;
  a->port_ = ntohs(addr.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port
                                              : reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  return a;
}

acceptor::~acceptor() {
  ::shutdown(fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  ::close(fd_);
}

void acceptor::run() {
  for (;;) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    int c = ::accept4(fd_, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC);
    if (c < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        continue;
      }
      return;  // shut down
    }
    int one = 1;
    ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char host[NI_MAXHOST] = "unknown", serv[NI_MAXSERV] = "0";
    ::getnameinfo(reinterpret_cast<sockaddr*>(&from), from_len, host, sizeof(host), serv,
                  sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV);
    to_->add(c, std::string{host} + ":" + serv, host);
  }
}

}  // namespace fusee::tls
