// The DNS-rebinding guard of both HTTP servers: on a node without tokens, a request naming a
// host the node does not allow (host_allow_list.hpp) is refused from its headers.
#pragma once

#include <optional>

#include "app/host_allow_list.hpp"
#include "app/http_server.hpp"

namespace fusee::server {
class token_store;
}

namespace fusee::app {

/// Nothing if `ex` may be answered: a node with tokens required, no Host header (HTTP/1.0: not a
/// browser's), or a Host `hosts` allows; otherwise the 403 refusing it (code `host_not_allowed`),
/// logged at most once a minute. Any thread.
std::optional<http_reply> check_host(const http_exchange& ex, const host_allow_list& hosts,
                                     const server::token_store* tokens);

}  // namespace fusee::app
