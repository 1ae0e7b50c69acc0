// The names a request may give in its `Host` header. A web page whose DNS name was rebound to this
// node's address reaches it under that name, so on a node without tokens and without TLS a
// request is answered only when its Host is an IP literal, localhost (or a name under .localhost),
// a name the node listens or advertises under or its cluster entry's `http` names, or one of
// `server.allowed_hosts` (host_check.hpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "actors/node_settings.hpp"

namespace fusee::app {

/// The host of `authority` ("host", "host:port", "[v6]:port"), lower-cased, without brackets and
/// without one trailing dot (the same DNS name).
std::string host_of(std::string_view authority);

/// True if `authority`'s host is an IP literal, localhost or a name under .localhost: names a
/// DNS server cannot rebind to this node (RFC 6761 §6.3; Chrome and Firefox resolve .localhost
/// to loopback themselves, other resolvers should).
bool names_an_address(std::string_view authority);

class host_allow_list {
public:
  /// Addresses, localhost and `names` (lower-cased; "*" = any host).
  explicit host_allow_list(std::vector<std::string> names);
  /// For a node's HTTP servers: `server.allowed_hosts`, the hosts of its listen addresses and of
  /// `advertise`, and its own entry's `http` in the cluster map; with `tls`, any host as well (a
  /// rebound name fails the certificate check; those names still count for names()).
  static host_allow_list for_node(const server::node_settings& s, bool tls);

  /// True if a request naming `authority` may be answered: an address, a name given, or any with
  /// "*".
  bool allows(std::string_view authority) const;
  /// True if `authority` is an address or a name given by name: "*" (or TLS) does not count. The
  /// Origin check's rule: a page's own origin is trusted only under such a host.
  bool names(std::string_view authority) const;

private:
  bool any_ = false;
  std::vector<std::string> names_;
};

}  // namespace fusee::app
