#include "app/bearer.hpp"

#include <algorithm>

#include "logging/logging.hpp"
#include "protocol/json_text.hpp"

namespace fusee::app {

std::optional<http_reply> check_bearer(const http_exchange& ex, server::token_store* tokens,
                                       proto::scope needed) {
  if (tokens == nullptr || !tokens->required()) return std::nullopt;
  auto what = ex.method + " " + ex.path;
  auto refuse = [&](unsigned status, const std::string& why) {
    tokens->count_refusal();
    server::logging::warn_limited(
        "bearer " + why,
        fmt::format("refused an HTTP request: {} request={}", why, server::logging::quoted(what)));
    http_reply r{status, "application/json",
                 proto::json_error(why, status == 401 ? "unauthenticated" : "forbidden")};
    if (status == 401) r.headers["WWW-Authenticate"] = "Bearer realm=\"fusee\"";
    return r;
  };
  auto h = ex.headers.find("authorization");
  constexpr std::string_view prefix = "bearer ";  // the scheme in any case (RFC 9110 §11.1)
  auto scheme_is_bearer = [&](std::string_view v) {
    return v.size() >= prefix.size() &&
           std::equal(prefix.begin(), prefix.end(), v.begin(),
                      [](char a, char b) { return a == (b >= 'A' && b <= 'Z' ? b + 32 : b); });
  };
  if (h == ex.headers.end() || !scheme_is_bearer(h->second))
    return refuse(401, "this server requires a token: send `Authorization: Bearer <token>` with a "
                       "token of the " +
                           std::string{proto::scope_name(needed)} + " scope or above");
  auto list = tokens->tokens();
  auto* t = proto::token_for_secret(*list, std::string_view{h->second}.substr(prefix.size()));
  if (t == nullptr) return refuse(401, "the bearer token is not one this server accepts");
  if (t->scope < needed)
    return refuse(403, "token \"" + t->name + "\" has the " +
                           std::string{proto::scope_name(t->scope)} + " scope: " + what +
                           " needs a " + std::string{proto::scope_name(needed)} + " token");
  return std::nullopt;
}

}  // namespace fusee::app
