// One HTTP request with libcurl, for the tests (unit and integration): {status, body}, status 0
// when the request failed.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <curl/curl.h>

namespace fusee::test {

/// HTTPS: the CA that signs the server's certificate, and a client certificate and key (empty:
/// none).
struct https_files {
  std::string ca, cert, key;
};

/// {status, body}; status 0 and curl's error as the body when the request failed.
inline std::pair<long, std::string>
http_request(const std::string& method, uint16_t port, const std::string& path,
             const std::string& body = "", long timeout_ms = 30000,
             const std::vector<std::string>& headers = {}, const https_files* tls = nullptr) {
  CURL* c = curl_easy_init();
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
  if (tls != nullptr) {
    curl_easy_setopt(c, CURLOPT_CAINFO, tls->ca.c_str());
    if (!tls->cert.empty()) {
      curl_easy_setopt(c, CURLOPT_SSLCERT, tls->cert.c_str());
      curl_easy_setopt(c, CURLOPT_SSLKEY, tls->key.c_str());
    }
  }
  curl_slist* list = nullptr;
  for (auto& h : headers)
    list = curl_slist_append(list, h.c_str());
  if (list != nullptr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  std::string answer;
  auto url = std::string{tls ? "https" : "http"} + "://127.0.0.1:" + std::to_string(port) + path;
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  if (method == "HEAD") curl_easy_setopt(c, CURLOPT_NOBODY, 1L);  // (no body comes)
  if (method == "POST") {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, static_cast<long>(body.size()));
  }
  curl_easy_setopt(
      c, CURLOPT_WRITEFUNCTION, +[](char* d, size_t s, size_t n, void* u) {
        static_cast<std::string*>(u)->append(d, s * n);
        return s * n;
      });
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
  long status = 0;
  if (curl_easy_perform(c) == CURLE_OK)
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  else
    answer = error;
  curl_easy_cleanup(c);
  curl_slist_free_all(list);
  return {status, answer};
}

/// GET http://127.0.0.1:port/path with a 5 s time-out.
inline std::pair<long, std::string> http_get(uint16_t port, const std::string& path) {
  return http_request("GET", port, path, "", 5000);
}

}  // namespace fusee::test
