#include "actors/wake_records.hpp"

#include <utility>

namespace fusee::server {

wake_records::wake_records(uint32_t shards, spawner spawn, describer describe)
    : slots_(shards), spawn_(std::move(spawn)), describe_(std::move(describe)) {}

shard_actor wake_records::get(uint32_t shard) {
  std::lock_guard<std::mutex> lk{mtx_};
  if (down_ || shard >= slots_.size()) return {};
  auto& s = slots_[shard];
  s.used = period_;
  if (!s.actor) {
    s.actor = spawn_(shard, s.rest);
    spawned_++;
    actors_++;
  }
  return s.actor;
}

shard_actor wake_records::find(uint32_t shard) const {
  std::lock_guard<std::mutex> lk{mtx_};
  return shard < slots_.size() ? slots_[shard].actor : shard_actor{};
}

actor_stats wake_records::resting_stats(uint32_t shard, caf::actor_clock::time_point now) const {
  resting_record rest;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    if (shard < slots_.size()) rest = slots_[shard].rest;
  }
  return describe_ ? describe_(shard, rest, now) : actor_stats{"shard", shard};
}

void wake_records::advance_period() {
  std::lock_guard<std::mutex> lk{mtx_};
  period_++;
  cursor_ = 0;  // records may have become quiet anywhere
}

std::vector<uint32_t> wake_records::quiet(size_t max) {
  std::lock_guard<std::mutex> lk{mtx_};
  std::vector<uint32_t> out;
  // A record only becomes quiet when the period advances: past the end, nothing is left to find.
  for (; cursor_ < slots_.size() && out.size() < max; ++cursor_)
    if (slots_[cursor_].actor && slots_[cursor_].used + 3 <= period_) out.push_back(cursor_);
  return out;
}

void wake_records::rest(uint32_t shard, const resting_record& rest) {
  std::lock_guard<std::mutex> lk{mtx_};
  if (shard >= slots_.size()) return;
  auto& s = slots_[shard];
  if (s.actor) actors_--;
  s.actor = shard_actor{};
  s.rest = rest;
}

uint64_t wake_records::spawned() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return spawned_;
}

uint64_t wake_records::actors() const {
  std::lock_guard<std::mutex> lk{mtx_};
  return actors_;
}

void wake_records::shut_down() {
  std::vector<shard_actor> all;
  {
    std::lock_guard<std::mutex> lk{mtx_};
    down_ = true;
    for (auto& s : slots_)
      if (s.actor) all.push_back(std::exchange(s.actor, shard_actor{}));
    actors_ = 0;
    spawn_ = nullptr;  // lets go of the scheduler's handle
  }
  for (auto& r : all)
    caf::anon_send_exit(r, caf::exit_reason::user_shutdown);
}

void wake_records::set(uint32_t shard, shard_actor a) {
  std::lock_guard<std::mutex> lk{mtx_};
  auto& s = slots_.at(shard);
  if (!s.actor && a) actors_++;
  s.actor = std::move(a);
}

}  // namespace fusee::server
