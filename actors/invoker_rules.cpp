#include "actors/invoker_rules.hpp"

#include <algorithm>
#include <limits>

#include "protocol/messages.hpp"

namespace fusee::server::rules {

namespace {

bool has(const std::vector<std::string>& types, const std::string& t) {
  return std::find(types.begin(), types.end(), t) != types.end();
}

}  // namespace

ms backoff(uint32_t failures, ms base, ms cap, uint64_t random_bits) {
  uint32_t shift = std::min<uint32_t>(failures == 0 ? 0 : failures - 1, 20);
  auto d = std::min<ms>(base * (int64_t{1} << shift), cap);
  double jitter = static_cast<double>(random_bits % 401) / 1000.0 - 0.2;  // -0.2 .. +0.2
  return ms{static_cast<int64_t>(static_cast<double>(d.count()) * (1.0 + jitter))};
}

int choose_endpoint(const std::vector<std::vector<std::string>>& endpoint_types,
                    const std::vector<std::string>& starts,
                    const std::vector<std::string>& awaiting, int last_endpoint) {
  int n = static_cast<int>(endpoint_types.size());
  for (auto& t : starts)
    for (int i = 0; i < n; ++i)
      if (has(endpoint_types[i], t)) return i;
  for (auto& t : awaiting)
    for (int i = 0; i < n; ++i)
      if (i != last_endpoint && has(endpoint_types[i], t)) return i;
  if (last_endpoint >= 0 && last_endpoint < n) return last_endpoint;
  for (int i = 0; i < n; ++i)
    if (endpoint_types[i].empty()) return i;
  return 0;
}

uint32_t answer_deadline_ms(uint32_t budget_ms, uint32_t grace_ms) {
  return static_cast<uint32_t>(
      std::min<uint64_t>(uint64_t{budget_ms} + grace_ms, std::numeric_limits<uint32_t>::max()));
}

uint32_t send_within_ms(uint32_t budget_ms) {
  return std::max<uint32_t>(1, budget_ms - std::min<uint32_t>(budget_ms / 10, 1000));
}

uint32_t invocation_shards(uint32_t max_shards, uint32_t max_frame_mb) {
  uint32_t most = proto::max_invocation_shards(max_frame_mb);
  return max_shards == 0 ? most : std::min(max_shards, most);
}

std::vector<std::vector<uint32_t>> group(const std::vector<uint32_t>& shards, uint32_t free_slots,
                                         uint32_t max_shards) {
  std::vector<std::vector<uint32_t>> out;
  size_t per = max_shards == 0 ? std::max<size_t>(shards.size(), 1) : max_shards;
  for (size_t i = 0; i < shards.size() && out.size() < free_slots; i += per)
    out.emplace_back(shards.begin() + static_cast<ptrdiff_t>(i),
                     shards.begin() + static_cast<ptrdiff_t>(std::min(shards.size(), i + per)));
  return out;
}

}  // namespace fusee::server::rules
