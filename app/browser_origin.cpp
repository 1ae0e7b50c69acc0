#include "app/browser_origin.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

#include <arpa/inet.h>

#include "protocol/json_text.hpp"

namespace fusee::app {

namespace {

std::string lower(std::string_view s) {
  std::string out{s};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

/// The host of `authority` ("host", "host:port", "[v6]:port") if it is an IP literal or
/// localhost.
bool is_address(std::string_view authority) {
  std::string host;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) return false;
    host = std::string{authority.substr(1, close - 1)};
    in6_addr v6{};
    return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  }
  host = std::string{authority.substr(0, authority.find(':'))};
  in_addr v4{};
  return host == "localhost" || ::inet_pton(AF_INET, host.c_str(), &v4) == 1;
}

}  // namespace

std::optional<http_reply> check_origin(const http_exchange& ex) {
  auto o = ex.headers.find("origin");
  if (o == ex.headers.end()) return std::nullopt;
  auto origin = lower(o->second);
  auto h = ex.headers.find("host");
  std::string_view authority = origin;
  for (std::string_view scheme : {"http://", "https://"})
    if (authority.substr(0, scheme.size()) == scheme) authority.remove_prefix(scheme.size());
  bool own = authority.size() < origin.size() && h != ex.headers.end() &&
             authority == lower(h->second) && is_address(authority);
  if (own) return std::nullopt;
  return http_reply{403, "application/json",
                    proto::json_error("a request from the web page " + o->second +
                                          ": this API answers only pages of its own address "
                                          "(clients other than browsers send no Origin header)",
                                      "cross_origin") +
                        "\n"};
}

}  // namespace fusee::app
