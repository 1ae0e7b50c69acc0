// A small HTTP server on libmicrohttpd, in two modes. start(): a thread per connection runs the
// handler, which may block (the admin endpoints, the invocation endpoint of `fusee handler`).
// start_async(): one polling thread; the handler must not block: it gets a responder it calls
// once, now or later from any thread, and the connection waits suspended meanwhile (the HTTP
// API, where requests wait for workers).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "tls/context.hpp"

namespace fusee::tls {
class terminator;
}

namespace fusee::app {

struct http_exchange {
  std::string method;
  std::string path;      ///< decoded (%2F is a '/' here)
  std::string raw_path;  ///< as sent, before decoding (the API's routes split this one)
  std::map<std::string, std::string> headers;  ///< names in lower case; a repeated one: its last
  std::set<std::string> repeated_headers;      ///< names (lower case) given more than once
  std::map<std::string, std::string> query;    ///< ?key=value arguments, decoded
  std::string repeated_query;  ///< the first ?key given twice ("" if none; query has its last)
  std::string body;
};

struct http_reply {
  http_reply(unsigned status_ = 200, std::string content_type_ = "application/json",
             std::string body_ = {})
      : status(status_), content_type(std::move(content_type_)), body(std::move(body_)) {}
  unsigned status;
  std::string content_type;
  std::string body;
  std::map<std::string, std::string> headers;  ///< beyond Content-Type
};

struct pending_reply;

/// Answers one suspended request; copyable, thread-safe, only the first call counts. Calling it
/// after the client went away does nothing.
class http_responder {
public:
  explicit http_responder(std::shared_ptr<pending_reply> p) : p_(std::move(p)) {}
  void operator()(http_reply r) const;

private:
  std::shared_ptr<pending_reply> p_;
};

class http_server {
public:
  using handler = std::function<http_reply(const http_exchange&)>;
  using async_handler = std::function<void(const http_exchange&, http_responder)>;
  /// Asked with a request's method, path, query and headers before any of its body is read: a
  /// reply refuses it there (a missing token, say), so a peer that may not send a body cannot
  /// make the server hold one. Runs on the server's threads; must not block.
  using gate = std::function<std::optional<http_reply>(const http_exchange&)>;
  /// limits.max_http_connections' default (libmicrohttpd's own is 1,020).
  static constexpr uint32_t default_max_connections = 1024;

  /// What bounds a server, and what its log names the bound after. (Overloads stand for a
  /// default argument: GCC cannot take `= {}` of a nested struct with member initializers.)
  struct options {
    size_t max_body = 1 << 20;  ///< larger bodies get 413
    /// Bytes of bodies held at once over all requests beyond the first 64 KiB of each (0: no
    /// limit beyond max_body each); a body that would go past it gets 503, so many slow large
    /// bodies cannot take the memory, and small ones are never refused for them.
    size_t max_bodies = 0;
    tls::ctx_ptr tls;  ///< HTTPS (TLS 1.3) when set
    gate g;            ///< asked before a body is read, if set
    /// Connections open at once (at least 1; with TLS, handshakes included).
    uint32_t max_connections = default_max_connections;
    /// The setting or option that sets max_connections, named when the limit is reached.
    std::string limit_name = "limits.max_http_connections";
  };

  /// Serves on host:port (numeric IPv4; port 0 = any free port) until destroyed; HTTPS with
  /// `o.tls`. Bodies over `o.max_body` bytes get 413 (before they are read, when their
  /// Content-Length says so); `o.g` first, if given. At most `o.max_connections` connections
  /// are open at once: more are closed as they come and counted, or with start_async() without
  /// TLS wait in the kernel's accept queue; either is said once a minute, naming
  /// `o.limit_name` and the listener's bound port. nullptr and `*err` on failure.
  static std::unique_ptr<http_server> start(const std::string& host, uint16_t port, handler h,
                                            std::string* err, options o);
  static std::unique_ptr<http_server> start(const std::string& host, uint16_t port, handler h,
                                            std::string* err);
  /// As start(), with an async handler on one polling thread.
  static std::unique_ptr<http_server> start_async(const std::string& host, uint16_t port,
                                                  async_handler h, std::string* err, options o);
  static std::unique_ptr<http_server> start_async(const std::string& host, uint16_t port,
                                                  async_handler h, std::string* err);
  ~http_server();
  uint16_t port() const;
  /// Its TLS terminator (counters for /metrics); null without TLS.
  const tls::terminator* tls() const;
  /// Requests answered 413 (a body over max_body).
  uint64_t bodies_refused() const;
  /// Bytes of request bodies held now past each one's first 64 KiB (counted only with
  /// options::max_bodies).
  size_t bodies_held() const;
  /// Connections open (with TLS: handed over by the terminator).
  uint32_t connections_open() const;
  /// Connections closed as they came because max_connections were open.
  uint64_t connections_refused() const;
  /// Async requests whose client closed its connection while they waited (each answered at
  /// once, to nobody, so that its connection closes).
  uint64_t clients_gone() const;

  struct impl;

private:
  http_server() = default;
  static std::unique_ptr<http_server> make(options o);
  std::unique_ptr<impl> impl_;
};

}  // namespace fusee::app
