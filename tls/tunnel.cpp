#include "tls/tunnel.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

namespace fusee::tls {

namespace {

/// Appends the numeric addresses of `family` that `host` resolves to (those not in `out` yet);
/// getaddrinfo's result.
int add_addresses(const std::string& host, int family, std::vector<std::string>& out) {
  addrinfo hints{};
  hints.ai_family = family;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0) return rc;
  for (auto* ai = res; ai != nullptr; ai = ai->ai_next) {
    char ip[NI_MAXHOST];
    if (::getnameinfo(ai->ai_addr, ai->ai_addrlen, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST) ==
            0 &&
        std::find(out.begin(), out.end(), ip) == out.end())
      out.emplace_back(ip);
  }
  ::freeaddrinfo(res);
  return 0;
}

/// A lookup that got no answer, as against "no such name" or "no address of that family".
bool lookup_failed(int rc) {
  return rc != 0 && rc != EAI_NONAME && rc != EAI_NODATA && rc != EAI_ADDRFAMILY;
}

}  // namespace

std::vector<std::string> addresses_of(const std::string& host) {
  std::vector<std::string> out;
  add_addresses(host, AF_UNSPEC, out);
  return out;
}

host_lookup look_up(const std::string& host) {
  host_lookup out;
  out.v4_failed = lookup_failed(add_addresses(host, AF_INET, out.addresses));
  out.v6_failed = lookup_failed(add_addresses(host, AF_INET6, out.addresses));
  return out;
}

namespace {

/// `ip` (numeric) as a socket address with port 0; false if it is not one.
bool socket_address(const std::string& ip, sockaddr_storage& out, socklen_t& len) {
  out = {};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&out);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (::inet_pton(AF_INET, ip.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    len = sizeof(sockaddr_in);
    return true;
  }
  if (::inet_pton(AF_INET6, ip.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    len = sizeof(sockaddr_in6);
    return true;
  }
  return false;
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  return a->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

bool is_wildcard(const sockaddr* a) {
  if (a->sa_family == AF_INET)
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == htonl(INADDR_ANY);
  return a->sa_family == AF_INET6 &&
         IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

/// Binds `fd` (not yet connected) to the first of `sources` that suits a connection to `to`
/// (its family, loopback where `to` is), port left to the connect; false if none suits or the
/// bind fails (the kernel then picks the address).
bool bind_source(int fd, const sockaddr* to, const std::vector<std::string>& sources) {
  for (auto& ip : sources) {
    sockaddr_storage from;
    socklen_t len = 0;
    auto* at = reinterpret_cast<sockaddr*>(&from);
    if (!socket_address(ip, from, len) || at->sa_family != to->sa_family ||
        is_loopback(at) != is_loopback(to) || is_wildcard(at))
      continue;
    int one = 1;  // the port is chosen at connect, for this peer: no ephemeral port held alone
    ::setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    return ::bind(fd, at, len) == 0;
  }
  return false;
}

}  // namespace

std::vector<std::string> local_addresses(const std::vector<std::string>& addresses) {
  // An interface's address, or loopback (all of 127/8 is this host's). A bind() alone is not
  // proof: with ip_nonlocal_bind (hosts of floating addresses) any address binds, and links
  // dialled from one this host does not have would never be answered.
  std::vector<std::string> mine;
  ifaddrs* ifs = nullptr;
  if (::getifaddrs(&ifs) == 0) {
    for (auto* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr ||
          (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6))
        continue;
      char ip[NI_MAXHOST];
      socklen_t len =
          i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
      if (::getnameinfo(i->ifa_addr, len, ip, sizeof(ip), nullptr, 0, NI_NUMERICHOST) == 0)
        mine.emplace_back(ip);
    }
    ::freeifaddrs(ifs);
  }
  std::vector<std::string> out;
  for (auto& ip : addresses) {
    sockaddr_storage at;
    socklen_t len = 0;
    auto* a = reinterpret_cast<sockaddr*>(&at);
    if (!socket_address(ip, at, len) || is_wildcard(a)) continue;
    if (!is_loopback(a) && std::find(mine.begin(), mine.end(), ip) == mine.end()) continue;
    int fd = ::socket(a->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::bind(fd, a, len) == 0) out.push_back(ip);  // EADDRNOTAVAIL: not this host's
    ::close(fd);
  }
  return out;
}

int dial_tcp(const std::string& host, uint16_t port, uint32_t timeout_ms, std::string* why,
             int stop_fd, int receive_buffer, const std::vector<std::string>& sources) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  auto port_text = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &res); rc != 0) {
    *why = gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (auto* ai = res; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) continue;
    if (receive_buffer > 0)
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    if (!sources.empty()) bind_source(fd, ai->ai_addr, sources);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
      *why = std::strerror(errno);
      ::close(fd);
      fd = -1;
      continue;
    }
    pollfd p[2] = {{fd, POLLOUT, 0}, {stop_fd, POLLIN, 0}};
    int err = 0;
    socklen_t len = sizeof(err);
    if (::poll(p, stop_fd >= 0 ? 2 : 1, static_cast<int>(timeout_ms)) < 1 ||
        (p[0].revents & (POLLOUT | POLLERR | POLLHUP)) == 0 ||
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      *why = err != 0 ? std::strerror(err) : "timed out";
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

proto::result<std::unique_ptr<tunnel>> tunnel::start(terminator& via, std::string host,
                                                     uint16_t port, std::string server_name,
                                                     uint32_t connect_timeout_ms,
                                                     std::vector<std::string> sources) {
  std::unique_ptr<tunnel> t{new tunnel};
  t->via_ = &via;
  t->host_ = std::move(host);
  t->remote_port_ = port;
  t->server_name_ = std::move(server_name);
  t->timeout_ms_ = connect_timeout_ms;
  t->sources_ = std::move(sources);
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd, 16) != 0) {
    if (fd >= 0) ::close(fd);
    return proto::error{proto::err_code::io,
                        std::string{"cannot open a loopback port for a TLS tunnel: "} +
                            std::strerror(errno)};
  }
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  t->listen_fd_ = fd;
  t->stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  t->port_ = ntohs(addr.sin_port);
  t->thread_ = std::thread([raw = t.get()] { raw->run(); });
  return t;
}

tunnel::~tunnel() {
  uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));  // a dial in progress gives up
  ::shutdown(listen_fd_, SHUT_RDWR);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void tunnel::run() {
  for (;;) {
    int local = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (local < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // shut down
    }
    std::string why;
    int remote = dial_tcp(host_, remote_port_, timeout_ms_, &why, stop_fd_, 0, sources_);
    auto peer = host_ + ":" + std::to_string(remote_port_);
    if (remote < 0) {
      spdlog::debug("TLS tunnel: cannot connect to {}: {}", peer, why);
      ::close(local);
      continue;
    }
    via_->add_outbound(remote, local, peer, server_name_);
  }
}

}  // namespace fusee::tls
