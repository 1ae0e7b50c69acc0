#include "actors/http_client.hpp"

#include <chrono>
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
  std::chrono::steady_clock::time_point started;
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

bool http_client::answer_timed_out(bool curl_timed_out, double elapsed_ms, uint32_t timeout_ms) {
  // curl says "timed out" for its connect time-out too: that one is a failure to reach the
  // endpoint, ended before the whole transfer's time was up.
  return curl_timed_out && timeout_ms > 0 && elapsed_ms >= static_cast<double>(timeout_ms);
}

http_client::http_client(uint32_t max_connections) {
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
  {
    std::lock_guard<std::mutex> lk{mtx_};
    if (!stop_) {
      queue_.push_back(std::move(req));
      queued = true;
    }
  }
  if (!queued) {  // the server is stopping: answered here, as the header promises
    http_result res;
    res.id = req.id;
    res.error = "not sent: the server is stopping";
    if (req.done) req.done(std::move(res));
    return;
  }
  ++in_flight_;
  curl_multi_wakeup(static_cast<CURLM*>(multi_));
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
  auto* multi = static_cast<CURLM*>(multi_);
  std::unordered_map<CURL*, std::unique_ptr<transfer>> active;
  auto finish = [&](CURL* easy, transfer& t, CURLcode code) {
    http_result res;
    res.id = t.req.id;
    if (code == CURLE_OK) {
      long status = 0;
      curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
      res.status = status;
    }
    res.body = std::move(t.response);
    res.total_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t.started)
            .count();
    if (code != CURLE_OK) {
      res.error = t.errbuf[0] ? t.errbuf : curl_easy_strerror(code);
      res.timed_out =
          answer_timed_out(code == CURLE_OPERATION_TIMEDOUT, res.total_ms, t.req.timeout_ms);
    }
    --in_flight_;
    if (t.req.done) t.req.done(std::move(res));
  };
  while (!stop_) {
    std::deque<http_request> fresh;
    {
      std::lock_guard<std::mutex> lk{mtx_};
      fresh.swap(queue_);
    }
    for (auto& r : fresh) {
      auto t = std::make_unique<transfer>();
      t->req = std::move(r);
      t->started = std::chrono::steady_clock::now();
      CURL* easy = curl_easy_init();
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
      if (t->req.timeout_ms > 0)
        curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, static_cast<long>(t->req.timeout_ms));
      if (!t->req.ca_file.empty()) curl_easy_setopt(easy, CURLOPT_CAINFO, t->req.ca_file.c_str());
      if (!t->req.cert_file.empty()) {
        curl_easy_setopt(easy, CURLOPT_SSLCERT, t->req.cert_file.c_str());
        curl_easy_setopt(easy, CURLOPT_SSLKEY, t->req.key_file.c_str());
      }
      curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
      curl_multi_add_handle(multi, easy);
      active.emplace(easy, std::move(t));
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
    curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
  }
  for (auto& [easy, t] : active) {
    std::snprintf(t->errbuf, sizeof(t->errbuf), "aborted: the server is stopping");
    finish(easy, *t, CURLE_ABORTED_BY_CALLBACK);
    curl_multi_remove_handle(multi, easy);
    curl_easy_cleanup(easy);
  }
  std::deque<http_request> never;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    never.swap(queue_);
  }
  for (auto& r : never) {
    --in_flight_;
    if (r.done) r.done(http_result{r.id, 0, "aborted: the server is stopping", false, {}, 0});
  }
}

}  // namespace fusee::server
