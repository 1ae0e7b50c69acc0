#include "worker/append_window.hpp"

namespace fusee::worker {

void append_window::sent(uint32_t shard, uint64_t last_lsn) {
  unsynced_[shard].push_back(last_lsn);
  ++out_;
}

void append_window::durable(uint32_t shard, uint64_t lsn) {
  auto it = unsynced_.find(shard);
  if (it == unsynced_.end()) return;
  auto& q = it->second;
  for (; !q.empty() && q.front() <= lsn; q.pop_front())
    --out_;
  if (q.empty()) unsynced_.erase(it);
}

void append_window::releasing(uint32_t shard, uint64_t id) {
  auto it = unsynced_.find(shard);
  if (it == unsynced_.end()) return;  // nothing out: nothing held
  releases_[id] += it->second.size();
  unsynced_.erase(it);
}

bool append_window::answered(uint64_t id) {
  auto it = releases_.find(id);
  if (it == releases_.end()) return false;
  out_ -= it->second;
  releases_.erase(it);
  return true;
}

void append_window::forget(uint32_t shard) {
  auto it = unsynced_.find(shard);
  if (it == unsynced_.end()) return;
  out_ -= it->second.size();
  unsynced_.erase(it);
}

}  // namespace fusee::worker
