// The names a request may give in its `Host` header. A web page whose DNS name was rebound to this
// node's address reaches it under that name, so on a node without tokens and without TLS a
// request is answered only when its Host is an IP literal, localhost (or *.localhost), a name the
// node listens or advertises under, or one of `server.allowed_hosts`. Clients other than browsers
// name the node as they reach it; a request without Host (HTTP/1.0) is not a browser's.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "actors/node_settings.hpp"
#include "app/http_server.hpp"

namespace fusee::server {
class token_store;
}

namespace fusee::app {

/// The host of `authority` ("host", "host:port", "[v6]:port"), lower-cased, without brackets.
std::string host_of(std::string_view authority);

/// True if `authority`'s host is an IP literal, localhost or a name under .localhost: names no
/// DNS server can rebind (RFC 6761 §6.3; browsers resolve .localhost themselves).
bool names_an_address(std::string_view authority);

class host_allow_list {
public:
  /// Addresses, localhost and `names` (lower-cased; "*" = any host).
  explicit host_allow_list(std::vector<std::string> names);
  /// Every host (a node with TLS: a rebound name fails the certificate check).
  static host_allow_list any();
  /// For a node's HTTP servers: `server.allowed_hosts`, the hosts of its listen addresses and of
  /// `advertise`, and its own entry's `http` in the cluster map; any host when `tls`.
  static host_allow_list for_node(const server::node_settings& s, bool tls);

  bool allows(std::string_view authority) const;

private:
  bool any_ = false;
  std::vector<std::string> names_;
};

/// Nothing if `ex` may be answered: a node with tokens required, no Host header, or a Host
/// `hosts` allows; otherwise the 403 refusing it (code `host_not_allowed`). Any thread.
std::optional<http_reply> check_host(const http_exchange& ex, const host_allow_list& hosts,
                                     const server::token_store* tokens);

}  // namespace fusee::app
