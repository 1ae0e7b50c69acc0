// Accepts worker and client connections on the listen address with its own thread and starts a
// session for each (its actor, and its reading by the context's io_loop). Out of descriptors, it
// backs off and says so once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "actors/session.hpp"
#include "tls/terminator.hpp"

namespace fusee::server {

class listener {
public:
  /// Binds host:port (0 = any free port) and starts accepting; nullptr and `*err` on failure.
  /// With `tls`, every connection is a TLS 1.3 one (a tls::terminator ends it).
  static std::unique_ptr<listener> start(caf::actor_system& sys, const std::string& host,
                                         uint16_t port, session_context ctx, std::string* err,
                                         tls::ctx_ptr tls = nullptr);
  ~listener();
  uint16_t port() const { return port_; }
  /// Its TLS terminator (counters for /metrics); null without TLS.
  const tls::terminator* tls() const { return tls_.get(); }
  /// Stops accepting; open sessions go on until they are closed.
  void stop();

private:
  listener() = default;
  void accept_loop();
  /// Sleeps up to `d` (an out-of-descriptors backoff); false once stop() was called.
  bool pause(std::chrono::milliseconds d);
  /// Answers a connection over a limit with ERR TOO_LARGE naming it, and closes it.
  void refuse(int fd, const std::string& peer, const std::string& why);

  int fd_ = -1;
  uint16_t port_ = 0;
  caf::actor_system* sys_ = nullptr;
  session_context ctx_;
  std::thread thread_;
  std::mutex mtx_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::shared_ptr<connection_limits> limits_;
  std::unique_ptr<tls::terminator> tls_;
  std::chrono::steady_clock::time_point last_refusal_log_{};
};

}  // namespace fusee::server
