#include "app/host_allow_list.hpp"

#include <algorithm>
#include <cctype>

#include <arpa/inet.h>

namespace fusee::app {

std::string host_of(std::string_view authority) {
  std::string_view host;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    host = close == std::string_view::npos ? authority : authority.substr(1, close - 1);
  } else {
    host = authority.substr(0, authority.find(':'));
  }
  if (host.size() > 1 && host.back() == '.') host.remove_suffix(1);
  std::string out{host};
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return out;
}

bool names_an_address(std::string_view authority) {
  bool bracketed = !authority.empty() && authority.front() == '[';
  auto host = host_of(authority);
  if (bracketed) {
    in6_addr v6{};
    return ::inet_pton(AF_INET6, host.c_str(), &v6) == 1;
  }
  constexpr std::string_view local = "localhost", sub = ".localhost";
  in_addr v4{};
  return host == local ||
         (host.size() > sub.size() &&
          host.compare(host.size() - sub.size(), sub.size(), sub) == 0) ||
         ::inet_pton(AF_INET, host.c_str(), &v4) == 1;
}

host_allow_list::host_allow_list(std::vector<std::string> names) {
  for (auto& n : names) {
    auto lower = host_of(n);
    if (lower == "*") any_ = true;
    if (!lower.empty()) names_.push_back(std::move(lower));
  }
}

host_allow_list host_allow_list::for_node(const server::node_settings& s, bool tls) {
  // (listen addresses in host:port form; a name without a port is its own host)
  std::vector<std::string> names = s.allowed_hosts;
  for (auto* at : {&s.listen, &s.http_listen, &s.admin_listen, &s.advertise})
    names.push_back(*at);
  for (auto& n : s.cluster.nodes)
    if (s.clustered && n.name == s.cluster_node) names.push_back(n.http);
  if (tls) names.push_back("*");  // any Host; the names above still count for names()
  return host_allow_list{std::move(names)};
}

bool host_allow_list::allows(std::string_view authority) const {
  return any_ || names(authority);
}

bool host_allow_list::names(std::string_view authority) const {
  if (names_an_address(authority)) return true;
  auto host = host_of(authority);
  return host != "*" && std::find(names_.begin(), names_.end(), host) != names_.end();
}

}  // namespace fusee::app
