// A listening socket whose connections go to a terminator: the accept side of a TLS listener
// for servers that do not accept themselves (the HTTP servers, the cluster's link port). One
// thread blocks in accept(); out of descriptors it pauses and tries again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "protocol/result.hpp"
#include "tls/terminator.hpp"

namespace fusee::tls {

class acceptor {
public:
  /// Binds host:port (numeric host; port 0: any free port) and hands each connection to `to`,
  /// which outlives the acceptor.
  static proto::result<std::unique_ptr<acceptor>> start(const std::string& host, uint16_t port,
                                                        terminator& to);
  /// Binds host:port and listens; accepts nothing before hand_to() (so that port() is known
  /// before the terminator is made).
  static proto::result<std::unique_ptr<acceptor>> bind(const std::string& host, uint16_t port);
  /// Starts accepting into `to`, which outlives the acceptor. Once. Fails only when its thread
  /// cannot start (out of threads or memory).
  proto::result<void> hand_to(terminator& to);
  ~acceptor();
  uint16_t port() const { return port_; }

private:
  acceptor() = default;
  void run();

  terminator* to_ = nullptr;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
};

}  // namespace fusee::tls
