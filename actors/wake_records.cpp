#include "actors/wake_records.hpp"

#include <utility>

namespace fusee::server {

wake_records::wake_records(uint32_t shards, spawner spawn, describer initial)
    : records_(shards), spawn_(std::move(spawn)), initial_(std::move(initial)) {}

actor_stats wake_records::initial_stats(uint32_t shard) const {
  return initial_ ? initial_(shard) : actor_stats{"shard", shard};
}

shard_actor wake_records::get(uint32_t shard) {
  std::lock_guard<std::mutex> lk{mtx_};
  if (down_ || shard >= records_.size()) return {};
  auto& r = records_[shard];
  if (!r) {
    r = spawn_(shard);
    spawned_++;
  }
  return r;
}

shard_actor wake_records::find(uint32_t shard) const {
  std::lock_guard<std::mutex> lk{mtx_};
  return shard < records_.size() ? records_[shard] : shard_actor{};
}

uint64_t wake_records::spawned() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return spawned_;
}

void wake_records::shut_down() {
  std::vector<shard_actor> all;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    down_ = true;
    for (auto& r : records_)
      if (r) all.push_back(std::exchange(r, shard_actor{}));
    spawn_ = nullptr;  // lets go of the scheduler's handle
  }
  for (auto& r : all)
    if (r) caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

void wake_records::set(uint32_t shard, shard_actor a) {
  std::lock_guard<std::mutex> lk{mtx_};
  records_.at(shard) = std::move(a);
}

}  // namespace fusee::server
