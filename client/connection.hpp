// A small blocking protocol client for workers and clients (tests, tools, the load generator).
// One connection, frames in and out; no threads of its own, no CAF. One thread may send while
// another receives (a worker's keep-alive pings while its loop reads); two sends at once are the
// caller's to serialize.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/security.hpp"
#include "protocol/auth.hpp"
#include "protocol/messages.hpp"
#include "protocol/result.hpp"
#include "tls/context.hpp"

namespace fusee::client {

class connection {
public:
  connection() = default;
  ~connection();
  connection(connection&& other) noexcept;
  connection& operator=(connection&& other) noexcept;
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  /// Connects to host:port (numeric IPv4 or a name), with TCP_NODELAY. A nonzero
  /// `receive_buffer` sets SO_RCVBUF before connecting (tests use a tiny one to make the server
  /// write in pieces).
  static proto::result<connection> open(const std::string& host, uint16_t port,
                                        int receive_buffer = 0);
  /// As open(), then the TLS handshake (checking the server's certificate and the name dialled,
  /// or sec.tls.server_name) and AUTH as `sec` asks. Errors say what was refused and by whom.
  static proto::result<connection>
  open(const std::string& host, uint16_t port, const security& sec,
       std::chrono::milliseconds timeout = std::chrono::seconds(10));

  /// Sends one message; false if the connection failed.
  bool send(const proto::any_message& m);
  /// Sends raw bytes (tests use it for malformed input).
  bool send_raw(const proto::bytes& b);

  /// The next frame from the server, decoded; an error on time-out (err_code::io, "timed out"),
  /// on a closed connection or on a bad frame.
  proto::result<proto::any_message> receive(std::chrono::milliseconds timeout);

  /// True when the last receive() failed because nothing came in time (receive(0ms) only takes
  /// what has arrived).
  bool timed_out() const { return timed_out_; }
  /// True once the peer closed the connection (after receive() reported it).
  bool closed() const { return closed_; }
  /// True once any byte came from the peer.
  bool received_any() const { return received_any_; }
  /// True once a whole frame came from the peer (it speaks Fusee's protocol).
  bool framed_any() const { return framed_any_; }
  /// Bytes received and not yet returned by receive() (a frame may be waiting without the
  /// socket being readable).
  size_t buffered() const { return decoder_.buffered(); }
  void close();
  int fd() const { return fd_; }
  /// True on a TLS connection; binding() is its exporter value (empty without TLS).
  bool tls() const { return ssl_ != nullptr; }
  const proto::bytes& binding() const { return binding_; }

private:
  /// Reads what the socket (or TLS) has; false when nothing came before `left` ms.
  proto::result<bool> read_some(int left_ms);

  /// The TLS session's own send and receive steps, under ssl_mu_ (an SSL object is not safe to
  /// use from two threads at once); on a TLS connection the socket does not block, so the lock is
  /// never held through a wait.
  proto::result<bool> tls_read(uint8_t* buf, size_t size);

  int fd_ = -1;
  SSL* ssl_ = nullptr;
  std::unique_ptr<std::mutex> ssl_mu_;  ///< with ssl_: one SSL_* call at a time
  proto::bytes binding_;
  bool closed_ = false;
  bool timed_out_ = false;
  bool received_any_ = false;
  bool framed_any_ = false;
  proto::frame_decoder decoder_;
};

/// The answer to the first frame this side sent (`to` names it): as receive(), but silence or a
/// close before any byte came says that the port may not be a Fusee server's (an HTTP listener
/// waits for a request line and answers nothing). After AUTH, or any frame, that is not said.
/// `stop`, when given, is looked at every 100 ms while nothing comes: once set, the wait ends
/// with an io error that says so.
proto::result<proto::any_message> first_answer(connection& c, const char* to,
                                               std::chrono::milliseconds timeout,
                                               const std::atomic<bool>* stop = nullptr);

/// What AUTH proved (docs/protocol.md, "Extension: tokens").
struct authenticated {
  proto::scope scope = proto::scope::read;
  std::string token;  ///< the token's name on the server
};

/// Proves `secret` to the server and checks the server's proof in return (the first frames on a
/// connection to a server with tokens). An ERR from the server comes back as that error
/// (UNAUTHORIZED with its message); a server proof that does not match is UNAUTHORIZED too.
/// `binding` is the TLS exporter value, empty without TLS.
proto::result<authenticated> authenticate(connection& c, std::string_view secret,
                                          std::chrono::milliseconds timeout,
                                          proto::byte_view binding = {});

/// CLIENT_HELLO named `name`; waits for its OK and returns the server's shard count (an ERR
/// refusing it is returned as that error, any other answer as bad_body naming its kind).
proto::result<uint32_t> client_hello(connection& c, const std::string& name,
                                     std::chrono::milliseconds timeout);

/// HELLO with the given options (false: the send failed); lease_of() reads the answer.
bool send_hello(connection& c, uint32_t offers, uint32_t max_shards, const std::string& name,
                proto::invocation_id invocation = proto::invocation_id{},
                std::vector<std::string> types = {});
/// The answer to HELLO: the LEASE, or the ERR refusing it (or whatever else came) as an error.
proto::result<proto::lease> lease_of(proto::result<proto::any_message> answer);

/// HELLO with the given options and waits for LEASE (or the ERR refusing it).
proto::result<proto::lease> hello(connection& c, uint32_t offers, uint32_t max_shards,
                                  const std::string& name,
                                  std::chrono::milliseconds timeout = std::chrono::seconds(10),
                                  proto::invocation_id invocation = proto::invocation_id{},
                                  std::vector<std::string> types = {});

}  // namespace fusee::client
