#include "app/browser_origin.hpp"

#include <algorithm>
#include <cctype>
#include <string_view>

#include "protocol/json_text.hpp"

namespace fusee::app {

namespace {

std::string lower(std::string_view s) {
  std::string out{s};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

}  // namespace

std::optional<http_reply> check_origin(const http_exchange& ex, const host_allow_list& hosts) {
  auto o = ex.headers.find("origin");
  if (o == ex.headers.end()) return std::nullopt;
  auto origin = lower(o->second);
  auto h = ex.headers.find("host");
  std::string_view authority = origin;
  for (std::string_view scheme : {"http://", "https://"})
    if (authority.substr(0, scheme.size()) == scheme) authority.remove_prefix(scheme.size());
  bool own = authority.size() < origin.size() && h != ex.headers.end() &&
             authority == lower(h->second) && hosts.names(authority);
  if (own) return std::nullopt;
  return http_reply{
      403, "application/json",
      proto::json_error("a request from the web page " + o->second +
                            ": this API answers only pages of its own origin at an address or "
                            "a name it is configured under (clients other than browsers send no "
                            "Origin header)",
                        "cross_origin") +
          "\n"};
}

}  // namespace fusee::app
