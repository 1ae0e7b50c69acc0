// Requests from web pages. A browser names the page behind a request in its `Origin` header; the
// HTTP API answers only pages of its own origin at a host it names (host_allow_list::names: an IP
// literal, localhost, a name it is configured under, never "*"), so a page of another site, or
// one whose DNS name was rebound to this address, cannot drive it from a browser on the node's
// machine. Clients
// that are not browsers (curl, the fusee clients) send no Origin and are not concerned.
#pragma once

#include <optional>

#include "app/host_allow_list.hpp"
#include "app/http_server.hpp"

namespace fusee::app {

/// Nothing if `ex` carries no Origin, or one whose authority is its Host and named by `hosts`;
/// otherwise the 403 refusing it (code `cross_origin`).
std::optional<http_reply> check_origin(const http_exchange& ex, const host_allow_list& hosts);

}  // namespace fusee::app
