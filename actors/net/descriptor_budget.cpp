#include "actors/net/descriptor_budget.hpp"

#include <algorithm>

namespace fusee::server {

descriptor_plan plan_descriptors(const descriptor_demand& d, uint64_t descriptors) {
  uint64_t per_connection = std::max<uint32_t>(d.per_connection, 1);
  uint64_t per_http = std::max<uint32_t>(d.per_http_connection, 1);
  uint64_t posts = uint64_t{d.invoker_posts} * descriptors_per_post;
  uint64_t http = uint64_t{d.http_listeners} * d.http_connections * per_http;
  uint64_t connections = uint64_t{d.connections} * per_connection;

  descriptor_plan p;
  p.wanted = reserved_descriptors + posts + http + connections;
  p.connections = std::max<uint32_t>(d.connections, 1);
  p.http_connections = std::max<uint32_t>(d.http_connections, 1);
  p.invoker_connections = d.invoker_posts;
  if (p.wanted <= descriptors) return p;

  p.cut = true;
  uint64_t left = descriptors > reserved_descriptors ? descriptors - reserved_descriptors : 0;
  uint64_t side = left / 2;  // at most this much for the POSTs and the HTTP listeners together
  uint64_t side_used = posts + http;
  if (posts + http > side) {
    uint64_t posts_kept = std::min(posts, side);
    if (d.invoker_posts > 0)
      p.invoker_connections =
          static_cast<uint32_t>(std::max<uint64_t>(posts_kept / descriptors_per_post, 1));
    uint64_t http_room = side - posts_kept;
    if (d.http_listeners > 0)
      p.http_connections = static_cast<uint32_t>(std::clamp<uint64_t>(
          http_room / (uint64_t{d.http_listeners} * per_http), 1, p.http_connections));
    side_used = uint64_t{p.invoker_connections} * descriptors_per_post +
                uint64_t{d.http_listeners} * p.http_connections * per_http;
  }
  uint64_t room = left > side_used ? left - side_used : 0;
  p.connections =
      static_cast<uint32_t>(std::clamp<uint64_t>(room / per_connection, 1, p.connections));
  return p;
}

}  // namespace fusee::server
