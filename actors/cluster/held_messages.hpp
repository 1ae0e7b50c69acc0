// Messages for a peer that is not up, kept by the cluster actor until it is: one per (sender
// shard, outbox id), a resend replacing the copy held, bounded in number and bytes. Past the
// bounds a message is not kept: its sender resends it until it is acknowledged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "actors/directory_interface.hpp"

namespace fusee::server {

class held_messages {
public:
  static constexpr size_t default_max_messages = 10000;
  static constexpr size_t default_max_bytes = size_t{64} << 20;  ///< of payload

  explicit held_messages(size_t max_messages = default_max_messages,
                         size_t max_bytes = default_max_bytes)
      : max_messages_(max_messages), max_bytes_(max_bytes) {}

  /// Keeps `m` (in place of a copy held of the same message); false, keeping nothing new and
  /// leaving a copy held before as it was, when that would pass a bound.
  bool hold(remote_message&& m);
  /// Everything held, by (sender shard, outbox id); nothing is held afterwards.
  std::vector<remote_message> take();

  bool empty() const { return held_.empty(); }
  size_t size() const { return held_.size(); }
  size_t bytes() const { return bytes_; }

private:
  size_t max_messages_, max_bytes_;
  std::map<std::pair<uint32_t, uint64_t>, remote_message> held_;
  size_t bytes_ = 0;
};

}  // namespace fusee::server
