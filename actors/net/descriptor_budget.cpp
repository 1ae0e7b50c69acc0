#include "actors/net/descriptor_budget.hpp"

#include <algorithm>

namespace fusee::server {

descriptor_plan plan_descriptors(const descriptor_demand& d, uint64_t descriptors) {
  uint64_t per_connection = std::max<uint32_t>(d.per_connection, 1);
  uint64_t per_http = std::max<uint32_t>(d.per_http_connection, 1);
  uint64_t reserve = reserved_descriptors + uint64_t{d.cluster_peers} * descriptors_per_peer;
  uint64_t posts = d.invoker_posts * descriptors_per_post;
  uint64_t http = uint64_t{d.http_listeners} * d.http_connections * per_http;
  uint64_t connections = uint64_t{d.connections} * per_connection;

  descriptor_plan p;
  p.wanted = reserve + posts + http + connections;
  p.connections = std::max<uint32_t>(d.connections, 1);
  p.http_connections = std::max<uint32_t>(d.http_connections, 1);
  p.invoker_connections = static_cast<uint32_t>(std::min<uint64_t>(d.invoker_posts, UINT32_MAX));
  if (p.wanted <= descriptors) return p;

  p.cut = true;
  uint64_t left = descriptors > reserve ? descriptors - reserve : 0;
  uint64_t side = left / 2;  // at most this much for the POSTs and the HTTP listeners together
  uint64_t side_used = posts + http;
  if (posts + http > side) {
    uint64_t http_kept = uint64_t{d.http_listeners} *
                         std::min<uint32_t>(p.http_connections, http_connections_kept) * per_http;
    uint64_t posts_kept = std::min(posts, side > http_kept ? side - http_kept : 0);
    if (d.invoker_posts > 0)
      p.invoker_connections =
          static_cast<uint32_t>(std::max<uint64_t>(posts_kept / descriptors_per_post, 1));
    uint64_t posts_used = uint64_t{p.invoker_connections} * descriptors_per_post;
    uint64_t http_room = side > posts_used ? side - posts_used : 0;
    if (d.http_listeners > 0)
      p.http_connections = static_cast<uint32_t>(std::clamp<uint64_t>(
          http_room / (uint64_t{d.http_listeners} * per_http), 1, p.http_connections));
    side_used = posts_used + uint64_t{d.http_listeners} * p.http_connections * per_http;
  }
  uint64_t room = left > side_used ? left - side_used : 0;
  p.connections =
      static_cast<uint32_t>(std::clamp<uint64_t>(room / per_connection, 1, p.connections));
  return p;
}

}  // namespace fusee::server
