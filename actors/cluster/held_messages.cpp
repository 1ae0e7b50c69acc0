#include "actors/cluster/held_messages.hpp"

namespace fusee::server {

bool held_messages::hold(remote_message&& m) {
  std::pair<uint32_t, uint64_t> key{m.from, m.outbox_id};
  auto it = held_.find(key);
  size_t replaced = it == held_.end() ? 0 : it->second.payload.size();
  if (it == held_.end() && held_.size() >= max_messages_) return false;
  if (bytes_ - replaced + m.payload.size() > max_bytes_) return false;
  bytes_ = bytes_ - replaced + m.payload.size();
  held_[key] = std::move(m);
  return true;
}

std::vector<remote_message> held_messages::take() {
  std::vector<remote_message> out;
  out.reserve(held_.size());
  for (auto& [key, m] : held_)
    out.push_back(std::move(m));
  held_.clear();
  bytes_ = 0;
  return out;
}

}  // namespace fusee::server
