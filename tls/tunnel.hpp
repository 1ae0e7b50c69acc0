// Plaintext in on a loopback port, TLS 1.3 out to one remote address: how CAF's middleman, which
// speaks plain TCP, reaches a cluster peer over mutual TLS. Each local connection is dialled
// through to the peer on the tunnel's own thread (a blocking connect, never on a CAF thread),
// then handed to a terminator for the client's handshake and the byte moving.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/result.hpp"
#include "tls/terminator.hpp"

namespace fusee::tls {

/// A TCP connection to host:port within `timeout_ms` (nonblocking, TCP_NODELAY), or -1 and
/// `*why`. A write to `stop_fd` (an eventfd; -1: none) ends the wait early; a nonzero
/// `receive_buffer` sets SO_RCVBUF before connecting. It leaves from the first of `sources`
/// (numeric addresses) of the address's family that is loopback where it is; from the address the
/// kernel picks when none is, or when that one cannot be bound.
int dial_tcp(const std::string& host, uint16_t port, uint32_t timeout_ms, std::string* why,
             int stop_fd = -1, int receive_buffer = 0,
             const std::vector<std::string>& sources = {});

/// The numeric addresses `host` resolves to (itself if it is one), each once; none if it does
/// not resolve. Blocks on DNS: call it at start, never on a CAF thread.
std::vector<std::string> addresses_of(const std::string& host);

/// What a lookup of `host` found, one address family at a time, so that a family whose lookup
/// failed (no answer: a time-out, a server failure) is told apart from one with no address (an
/// answer too).
struct host_lookup {
  std::vector<std::string> addresses;  ///< numeric, each once: IPv4 ones, then IPv6
  bool v4_failed = false, v6_failed = false;
};
/// Blocks on DNS (one lookup per family): call it on a thread of its own, never a CAF one.
host_lookup look_up(const std::string& host);

/// Of `addresses` (numeric), those a connection here can leave from: loopback ones and those an
/// interface of this host has; a wildcard address, or one no interface has (a public address
/// behind NAT, a floating address held elsewhere), is left out.
std::vector<std::string> local_addresses(const std::vector<std::string>& addresses);

class tunnel {
public:
  /// Listens on 127.0.0.1 (any free port) for connections to host:port, whose certificate must
  /// carry `server_name`, dialled from `sources` as dial_tcp() does (this node's own addresses,
  /// so that the peer knows it by them). `via` outlives the tunnel.
  static proto::result<std::unique_ptr<tunnel>> start(terminator& via, std::string host,
                                                      uint16_t port, std::string server_name,
                                                      uint32_t connect_timeout_ms,
                                                      std::vector<std::string> sources = {});
  ~tunnel();
  /// The loopback port that leads to the peer.
  uint16_t port() const { return port_; }

private:
  tunnel() = default;
  void run();

  terminator* via_ = nullptr;
  std::string host_, server_name_;
  std::vector<std::string> sources_;
  uint16_t remote_port_ = 0, port_ = 0;
  uint32_t timeout_ms_ = 5000;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  ///< written by the destructor: a dial in progress ends at once
  std::thread thread_;
};

}  // namespace fusee::tls
