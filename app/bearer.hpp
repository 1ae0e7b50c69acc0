// Bearer tokens on the HTTP API and the admin server: the same [[token]]s and scopes as the
// protocol's AUTH (server::token_store), sent as `Authorization: Bearer <token>`.
#pragma once

#include <optional>

#include "actors/token_store.hpp"
#include "app/http_server.hpp"
#include "protocol/auth.hpp"

namespace fusee::app {

/// Nothing if `ex` may go on (no tokens configured, or a token of `needed` scope or above);
/// otherwise the reply refusing it: 401 with `WWW-Authenticate: Bearer` without a known token,
/// 403 naming the token and the scope it lacks. Refusals are counted and logged, never the
/// token itself.
std::optional<http_reply> check_bearer(const http_exchange& ex, server::token_store* tokens,
                                       proto::scope needed);

}  // namespace fusee::app
