// A small HTTP server on libmicrohttpd: the admin endpoints (/healthz, /v1/invoker) and, in tests
// and the test handler, an endpoint that receives invocation POSTs. The handler runs on
// microhttpd's own threads (never on a CAF scheduler thread), so it may block briefly.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace fusee::app {

struct http_exchange {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  ///< names in lower case
  std::string body;
};

struct http_reply {
  unsigned status = 200;
  std::string content_type = "application/json";
  std::string body;
};

class http_server {
public:
  using handler = std::function<http_reply(const http_exchange&)>;

  /// Serves on host:port (numeric IPv4; port 0 = any free port) until destroyed.
  /// Bodies over `max_body` bytes get 413. nullptr and `*err` on failure.
  static std::unique_ptr<http_server> start(const std::string& host, uint16_t port, handler h,
                                            std::string* err, size_t max_body = 1 << 20);
  ~http_server();
  uint16_t port() const { return port_; }

  struct impl;

private:
  http_server() = default;
  std::unique_ptr<impl> impl_;
  uint16_t port_ = 0;
};

}  // namespace fusee::app
