// The invoker's HTTP client: one thread drives a libcurl multi handle; submit() is thread-safe and
// every completion is reported through the request's own callback, on the curl thread (it must
// not block: the endpoint that submitted the request sends itself a message). No CAF here.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fusee::server {

struct http_result;

struct http_request {
  uint64_t id = 0;
  std::string url;
  std::vector<std::string> headers;  ///< "name: value"
  std::string body;
  uint32_t timeout_ms = 0;  ///< the wait for a connection and the whole transfer; 0 = none
  /// Not begun within this long (all connections in use): never sent, a failure (0: timeout_ms).
  /// An invocation's POST has to begin while its budget still leaves time to work.
  uint32_t send_within_ms = 0;
  uint32_t send_deadline_ms() const { return send_within_ms ? send_within_ms : timeout_ms; }
  std::string ca_file, cert_file, key_file;
  /// Called once with the outcome, on the curl thread (also when the client stops first).
  std::function<void(http_result)> done;
};

/// A POST's outcome; also the message the curl thread sends to the endpoint that submitted it.
struct http_result {
  uint64_t id = 0;
  int64_t status = 0;  ///< HTTP status, 0 if the transfer failed
  std::string error;   ///< curl's message when it failed ("Couldn't connect to server", ...)
  bool timed_out = false;
  std::string body;
  /// Sent: from curl's start of it to the outcome. Not sent: how long it waited.
  double total_ms = 0;
  /// False: never sent (no connection free in time, the server stopping): no endpoint's latency.
  bool sent = true;
  /// Ended by this node's stop (aborted, or never sent): says nothing of the endpoint.
  bool stopping = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, http_result& x) {
  return f(x.id, x.status, x.error, x.timed_out, x.body, x.total_ms, x.sent, x.stopping);
}

/// Where the endpoint actors hand their POSTs: the curl thread in the server, a fake in tests.
class http_sender {
public:
  virtual ~http_sender() = default;
  /// Thread-safe; the completion is reported later, by message.
  virtual void submit(http_request req) = 0;
};

class http_client final : public http_sender {
public:
  /// Call curl_global_init() before any thread exists (STACK.md §7.16), then construct. At most
  /// `max_connections` POSTs run at once (the node's descriptor plan; 0: no limit): more wait
  /// here in order for one to end, each counting its wait against its time-out (`timeout_ms`
  /// covers the wait and the transfer). One whose time runs out while it waits is never sent
  /// and fails then, with an error saying why (not `timed_out`: no endpoint was slow).
  explicit http_client(uint32_t max_connections = 0);
  ~http_client();
  http_client(const http_client&) = delete;
  http_client& operator=(const http_client&) = delete;

  void submit(http_request req) override;
  /// Whether a transfer curl ended with CURLE_OPERATION_TIMEDOUT (`curl_timed_out`) ran out the
  /// request's `timeout_ms` (no answer in time): its request was sent (`request_sent`: then it
  /// was connected), or `elapsed_ms` reached the time-out (to curl's millisecond). Else it is
  /// the connect time-out: the endpoint was not reached, a failure as any other.
  static bool answer_timed_out(bool curl_timed_out, bool request_sent, double elapsed_ms,
                               uint32_t timeout_ms);
  /// Ends the thread; transfers still running complete with error "aborted: ...", those not
  /// sent yet with "not sent: the server is stopping".
  void stop();
  size_t in_flight() const { return in_flight_; }

private:
  void run();
  /// Answers a POST taken but never given to the curl thread's transfers: "not sent: the server
  /// is stopping" (and counts it out of in_flight).
  void answer_stopping(http_request& r);

  uint32_t max_connections_ = 0;
  void* multi_ = nullptr;  // CURLM*
  std::mutex mtx_;
  std::deque<http_request> queue_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> in_flight_{0};
  std::thread thread_;
};

}  // namespace fusee::server
