#include "actors/http_client.hpp"

#include <algorithm>
#include <chrono>
#include <list>
#include <map>
#include <memory>
#include <unordered_map>

#include <curl/curl.h>

namespace fusee::server {

namespace {

struct transfer {
  http_request req;
  curl_slist* headers = nullptr;
  std::string response;
  char errbuf[CURL_ERROR_SIZE] = {0};
  std::chrono::steady_clock::time_point started;  ///< taken by the curl thread
  std::chrono::steady_clock::time_point sent;     ///< given to curl (after any wait)
  /// While it waits for a connection: its place in the deadline index (timeout_ms > 0 only).
  std::multimap<std::chrono::steady_clock::time_point, transfer*>::iterator expiry;
  std::list<std::unique_ptr<transfer>>::iterator place;  ///< in the waiting line
  ~transfer() { curl_slist_free_all(headers); }
};

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<transfer*>(user);
  size_t len = size * n;
  if (t->response.size() + len > (1u << 20))  // answers are summaries: cap what we keep
    len = (1u << 20) > t->response.size() ? (1u << 20) - t->response.size() : 0;
  t->response.append(data, len);
  return size * n;
}

}  // namespace

namespace {
constexpr const char* not_sent_stopping = "not sent: the server is stopping";
}  // namespace

bool http_client::answer_timed_out(bool curl_timed_out, bool request_sent, double elapsed_ms,
                                   uint32_t timeout_ms) {
  // curl says "timed out" for its connect time-out too: that one is a failure to reach the
  // endpoint, ended before the whole transfer's time was up. (curl counts the time-out from its
  // own start, in whole milliseconds: the elapsed time here may fall just short of it.)
  return curl_timed_out && timeout_ms > 0 &&
         (request_sent || elapsed_ms + 1.0 >= static_cast<double>(timeout_ms));
}

http_client::http_client(uint32_t max_connections) : max_connections_(max_connections) {
  multi_ = curl_multi_init();
  if (max_connections > 0) {  // open at once, and kept open for reuse
    curl_multi_setopt(multi_, CURLMOPT_MAX_TOTAL_CONNECTIONS, static_cast<long>(max_connections));
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, static_cast<long>(max_connections));
  }
  thread_ = std::thread([this] { run(); });
}

http_client::~http_client() {
  stop();
  curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

void http_client::submit(http_request req) {
  bool queued = false;
  ++in_flight_;  // before the curl thread can see it (and count it out)
  {
    std::lock_guard<std::mutex> lk{mtx_};
    if (!stop_) {
      queue_.push_back(std::move(req));
      queued = true;
    }
  }
  if (!queued) {  // the server is stopping: answered here, as the header promises
    answer_stopping(req);
    return;
  }
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
}

void http_client::answer_stopping(http_request& r) {
  --in_flight_;
  http_result res;
  res.id = r.id;
  res.error = not_sent_stopping;
  res.sent = false;
  res.stopping = true;
  if (r.done) r.done(std::move(res));
}

void http_client::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk{mtx_};  // submit() checks it under the lock
    stop_ = true;
  }
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
  thread_.join();
}

void http_client::run() {
  using clock = std::chrono::steady_clock;
  auto* multi = static_cast<CURLM*>(multi_);
  std::unordered_map<CURL*, std::unique_ptr<transfer>> active;
  // POSTs beyond max_connections wait here, not in curl: curl 7.88 does not time out a transfer
  // that waits for a connection, so each one's deadline is kept here.
  std::list<std::unique_ptr<transfer>> waiting;
  std::multimap<clock::time_point, transfer*> expiries;
  bool stopping = false;  // set once the loop ends: whatever ends then, the stop ended
  auto report = [&](transfer& t, http_result res, clock::time_point now) {
    res.id = t.req.id;
    res.stopping = stopping;
    // A POST sent: its own time, not its wait for a connection (the node's, not the endpoint's).
    auto from = res.sent ? t.sent : t.started;
    res.total_ms = std::chrono::duration<double, std::milli>(now - from).count();
    --in_flight_;
    if (t.req.done) t.req.done(std::move(res));
  };
  auto not_sent = [&](transfer& t, std::string why) {
    http_result res;
    res.error = std::move(why);
    res.sent = false;
    report(t, std::move(res), clock::now());
  };
  auto finish = [&](CURL* easy, transfer& t, CURLcode code) {
    auto now = clock::now();
    http_result res;
    if (code == CURLE_OK) {
      long status = 0;
      curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
      res.status = status;
    }
    res.body = std::move(t.response);
    if (code != CURLE_OK) {
      res.error = t.errbuf[0] ? t.errbuf : curl_easy_strerror(code);
      double elapsed = std::chrono::duration<double, std::milli>(now - t.started).count();
      long request_bytes = 0;  // headers sent: the request went out on a connection
      curl_easy_getinfo(easy, CURLINFO_REQUEST_SIZE, &request_bytes);
      res.timed_out = answer_timed_out(code == CURLE_OPERATION_TIMEDOUT, request_bytes > 0, elapsed,
                                       t.req.timeout_ms);
    }
    report(t, std::move(res), now);
  };
  auto start = [&](std::unique_ptr<transfer> t) {
    CURL* easy = curl_easy_init();
    if (easy == nullptr) return not_sent(*t, "not sent: curl could not start a transfer");
    curl_easy_setopt(easy, CURLOPT_URL, t->req.url.c_str());
    curl_easy_setopt(easy, CURLOPT_POST, 1L);
    curl_easy_setopt(easy, CURLOPT_POSTFIELDS, t->req.body.data());  // not copied: kept in t
    curl_easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(t->req.body.size()));
    for (auto& h : t->req.headers)
      t->headers = curl_slist_append(t->headers, h.c_str());
    t->headers = curl_slist_append(t->headers, "Expect:");  // no 100-continue round trip
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, 5000L);
    t->sent = clock::now();
    if (t->req.timeout_ms > 0) {  // what is left of it after the wait for a connection
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(t->sent - t->started);
      auto left = std::max<int64_t>(1, int64_t{t->req.timeout_ms} - waited.count());
      curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(left));
    }
    if (!t->req.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, t->req.ca_file.c_str());
    if (!t->req.cert_file.empty()) {
      curl_easy_setopt(easy, CURLOPT_SSLCERT, t->req.cert_file.c_str());
      curl_easy_setopt(easy, CURLOPT_SSLKEY, t->req.key_file.c_str());
    }
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    if (auto rc = curl_multi_add_handle(multi, easy); rc != CURLM_OK) {
      curl_easy_cleanup(easy);
      return not_sent(*t, std::string{"not sent: "} + curl_multi_strerror(rc));
    }
    active.emplace(easy, std::move(t));
  };
  auto has_room = [&] { return max_connections_ == 0 || active.size() < max_connections_; };
  while (!stop_) {
    std::deque<http_request> fresh;
    {
      std::lock_guard<std::mutex> lk{mtx_};
      fresh.swap(queue_);
    }
    for (auto& r : fresh) {
      auto t = std::make_unique<transfer>();
      t->req = std::move(r);
      t->started = clock::now();
      if (waiting.empty() && has_room()) {
        start(std::move(t));
        continue;
      }
      auto* raw = t.get();
      raw->place = waiting.insert(waiting.end(), std::move(t));
      if (raw->req.send_deadline_ms() > 0)
        raw->expiry = expiries.emplace(
            raw->started + std::chrono::milliseconds(raw->req.send_deadline_ms()), raw);
    }
    int running = 0;
    curl_multi_perform(multi, &running);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      auto it = active.find(msg->easy_handle);
      if (it == active.end()) continue;
      finish(msg->easy_handle, *it->second, msg->data.result);
      curl_multi_remove_handle(multi, msg->easy_handle);
      curl_easy_cleanup(msg->easy_handle);
      active.erase(it);
    }
    // Those whose time ran out while they waited were never sent: they fail, not time out (no
    // endpoint was slow; the node's connections were all in use).
    auto now = clock::now();
    while (!expiries.empty() && expiries.begin()->first <= now) {
      transfer* t = expiries.begin()->second;
      expiries.erase(expiries.begin());
      auto owned = std::move(*t->place);
      waiting.erase(t->place);
      not_sent(*owned, "not sent: no connection free within its " +
                           std::to_string(t->req.send_deadline_ms()) + " ms (all " +
                           std::to_string(max_connections_) +
                           " connections that the node's file descriptors leave the invoker were "
                           "in use)");
    }
    bool started_any = false;
    while (!waiting.empty() && has_room()) {
      auto t = std::move(waiting.front());
      waiting.pop_front();
      if (t->req.send_deadline_ms() > 0) expiries.erase(t->expiry);
      start(std::move(t));
      started_any = true;
    }
    if (started_any) continue;  // let curl begin them before sleeping
    int wait_ms = 1000;
    if (!expiries.empty()) {
      auto until = std::chrono::ceil<std::chrono::milliseconds>(expiries.begin()->first - now);
      wait_ms = static_cast<int>(std::clamp<int64_t>(until.count(), 0, wait_ms));
    }
    curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
  }
  stopping = true;
  for (auto& [easy, t] : active) {
    std::snprintf(t->errbuf, sizeof(t->errbuf), "aborted: the server is stopping");
    finish(easy, *t, CURLE_ABORTED_BY_CALLBACK);
    curl_multi_remove_handle(multi, easy);
    curl_easy_cleanup(easy);
  }
  for (auto& t : waiting)
    not_sent(*t, not_sent_stopping);
  std::deque<http_request> never;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    never.swap(queue_);
  }
  for (auto& r : never)
    answer_stopping(r);
}

}  // namespace fusee::server
