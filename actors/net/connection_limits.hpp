// How many worker and client connections a node holds, in total and per peer address
// (limits.max_connections, limits.max_connections_per_peer), and what the limits refused
// (fusee_limit_refused_total). Threading: the accept thread admits, sessions release on their
// own threads; one mutex, held for a map update.
#pragma once

#include <atomic>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace fusee::server {

class connection_limits {
public:
  /// `configured`: limits.max_connections as set, when the descriptor budget cut it to
  /// `max_total` (a refusal then says so); 0 when it did not.
  connection_limits(uint32_t max_total, uint32_t max_per_peer, uint32_t configured = 0)
      : max_total_(max_total), max_per_peer_(max_per_peer), configured_(configured) {}

  /// Counts a new connection from `peer` (its address without the port), or says which limit
  /// refuses it (the message names the setting).
  std::optional<std::string> admit(const std::string& peer);
  /// The connection admitted for `peer` ended.
  void release(const std::string& peer);

  uint64_t open() const;

  /// What the limits refused, by limit (the metric's label).
  enum class limit : uint8_t {
    connections,
    connections_per_peer,
    hello_timeout,
    frame_timeout,
    appends_in_flight,
    frame_size,
  };
  static constexpr limit all[] = {limit::connections,       limit::connections_per_peer,
                                  limit::hello_timeout,     limit::frame_timeout,
                                  limit::appends_in_flight, limit::frame_size};
  void count(limit l) { refused_[static_cast<size_t>(l)].fetch_add(1, std::memory_order_relaxed); }
  uint64_t refused(limit l) const {
    return refused_[static_cast<size_t>(l)].load(std::memory_order_relaxed);
  }
  static const char* name(limit l);

private:
  const uint32_t max_total_, max_per_peer_;
  const uint32_t configured_;
  mutable std::mutex mu_;
  uint64_t total_ = 0;
  std::unordered_map<std::string, uint32_t> per_peer_;
  std::atomic<uint64_t> refused_[std::size(all)]{};
};

}  // namespace fusee::server
