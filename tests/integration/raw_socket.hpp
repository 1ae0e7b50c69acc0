// A plain TCP connection for tests that hold a listener's places or look at what it does with
// bytes that are no protocol's.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

namespace fusee::test {

/// A plain TCP connection to 127.0.0.1:port that has sent `bytes` (a request begun, say); from
/// the loopback address `from` if one is given (127.0.0.2, say: a peer at another address).
struct raw_socket {
  int fd = -1;
  explicit raw_socket(uint16_t port, const std::string& bytes = "", const std::string& from = "") {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    if (!from.empty()) {
      sockaddr_in me{};
      me.sin_family = AF_INET;
      REQUIRE(::inet_pton(AF_INET, from.c_str(), &me.sin_addr) == 1);
      REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&me), sizeof(me)) == 0);
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
    if (!bytes.empty())
      REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == ssize_t(bytes.size()));
  }
  raw_socket(raw_socket&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  ~raw_socket() {
    if (fd >= 0) ::close(fd);
  }
  /// What arrives within `wait`: "" once the server closed the connection, nullopt if nothing
  /// came (the connection still open).
  std::optional<std::string> read(std::chrono::milliseconds wait) { return read_fd(fd, wait); }
  /// An HTTP server's answer: what arrives until the server closes the connection, or until the
  /// answer's head and the body its Content-Length announces are in; each read waits up to
  /// `wait` ("" if nothing came).
  std::string http_answer(std::chrono::milliseconds wait) {
    std::string out;
    for (auto got = read(wait); got && !got->empty(); got = read(wait)) {
      out += *got;
      auto end = out.find("\r\n\r\n");
      auto len = out.find("Content-Length: ");
      if (end != std::string::npos && len != std::string::npos &&
          out.size() >= end + 4 + std::stoul(out.substr(len + 16)))
        break;
    }
    return out;
  }
  /// True if the server closes the connection within `wait` (what it sends before is dropped).
  bool closed_within(std::chrono::milliseconds wait) {
    auto deadline = std::chrono::steady_clock::now() + wait;
    for (auto now = std::chrono::steady_clock::now(); now < deadline;
         now = std::chrono::steady_clock::now()) {
      auto got = read_fd(fd, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now));
      if (got && got->empty()) return true;
    }
    return false;
  }
  /// As read(), on any socket.
  static std::optional<std::string> read_fd(int fd, std::chrono::milliseconds wait) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return std::nullopt;
    char buf[512];
    auto n = ::recv(fd, buf, sizeof(buf), 0);
    return std::string(buf, n > 0 ? size_t(n) : 0);
  }
};

/// A listening socket on a free loopback port that accepts nothing by itself: a relay's far end
/// (accept_one), or a port that takes connections in the kernel's backlog and answers nothing.
struct loopback_listener {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  uint16_t port = 0;
  loopback_listener() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
  loopback_listener(const loopback_listener&) = delete;
  loopback_listener& operator=(const loopback_listener&) = delete;
  ~loopback_listener() { ::close(fd); }
  /// The next connection opened here, within 5 s (-1: none came).
  int accept_one() {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return -1;
    return ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
  }
};

}  // namespace fusee::test
