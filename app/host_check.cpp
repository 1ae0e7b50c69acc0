#include "app/host_check.hpp"

#include "actors/token_store.hpp"
#include "logging/logging.hpp"
#include "protocol/json_text.hpp"

namespace fusee::app {

std::optional<http_reply> check_host(const http_exchange& ex, const host_allow_list& hosts,
                                     const server::token_store* tokens) {
  if (tokens != nullptr && tokens->required()) return std::nullopt;
  auto h = ex.headers.find("host");
  if (h == ex.headers.end() || hosts.allows(h->second)) return std::nullopt;
  auto host = host_of(h->second);
  server::logging::warn_limited("host not allowed",
                                fmt::format("refused an HTTP request for a host this node is not "
                                            "configured under host={}",
                                            server::logging::quoted(host)));
  return http_reply{
      403, "application/json",
      proto::json_error("this node does not answer requests for host \"" + host +
                            "\": without tokens it answers only requests that name it by "
                            "address, localhost, a name it listens or advertises under, or a name "
                            "in server.allowed_hosts (a web page whose name was rebound to this "
                            "address would otherwise read it)",
                        "host_not_allowed") +
          "\n"};
}

}  // namespace fusee::app
