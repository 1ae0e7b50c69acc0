// Tells when the peers of waiting HTTP connections close: libmicrohttpd does not poll a
// suspended connection, so a client that gave up on a long wait would keep its connection (and
// its place under max_http_connections) until the answer came.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace fusee::app {

class hangup_watch {
public:
  /// Called on the watch's own thread with the token add() returned for a socket whose peer
  /// closed (or shut down its side: a client that gave up; nothing more will be read from it).
  using on_hangup = std::function<void(uint64_t token)>;
  /// Starts the thread; nullptr and `*err` if the epoll set cannot be made.
  static std::unique_ptr<hangup_watch> start(on_hangup f, std::string* err);
  ~hangup_watch();  ///< stop() first
  hangup_watch(const hangup_watch&) = delete;
  hangup_watch& operator=(const hangup_watch&) = delete;

  /// Stops the thread (waits for a call of on_hangup going on); add() and remove() stay harmless
  /// until the watch is destroyed.
  void stop();

  /// A token for add(), never 0: the caller stores it where on_hangup looks before it adds.
  uint64_t next_token();
  /// Watches `fd` once (one hang-up, then nothing), told as `token`; false if it cannot be
  /// watched. The caller removes it before the socket can be closed.
  bool add(int fd, uint64_t token);
  void remove(int fd);

  struct state;

private:
  explicit hangup_watch(std::unique_ptr<state> s);
  std::unique_ptr<state> st_;
};

}  // namespace fusee::app
