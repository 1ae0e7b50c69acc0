#include "actors/inspect/shard_state.hpp"

#include "actors/invoker_interface.hpp"

namespace fusee::server {

uint8_t lease_mark_of(const shard_lease_view& lease) {
  return static_cast<uint8_t>(
      (lease.elsewhere ? lease_mark::elsewhere : 0) | (lease.holder != 0 ? lease_mark::held : 0) |
      (lease.blocked ? lease_mark::blocked : 0) |
      (lease.parked_calls > 0 || lease.parked_messages > 0 ? lease_mark::parked : 0));
}

uint8_t invoker_mark_of(const shard_invoker_view& invoker) {
  return static_cast<uint8_t>((invoker.state & ~invoking_mark) |
                              (invoker.invocation != 0 ? invoking_mark : 0));
}

shard_state state_of(uint8_t lease, int invoker) {
  if (lease & lease_mark::elsewhere) return shard_state::elsewhere;
  if (lease & lease_mark::held) return shard_state::held;
  if (lease & lease_mark::blocked) return shard_state::blocked;
  if (invoker >= 0) {
    if (invoker & invoking_mark) return shard_state::invoking;
    switch (invoker & ~invoking_mark) {
    case shard_status::backoff:
      return shard_state::backoff;
    case shard_status::ready:
      return shard_state::due;
    case shard_status::waiting:
      return shard_state::waiting;
    default:
      break;
    }
  }
  if (lease & lease_mark::parked) return shard_state::due;
  return shard_state::idle;
}

shard_state state_of(const shard_lease_view& lease, const shard_invoker_view* invoker) {
  return state_of(lease_mark_of(lease), invoker ? invoker_mark_of(*invoker) : -1);
}

std::string_view state_name(shard_state s) {
  switch (s) {
  case shard_state::elsewhere:
    return "elsewhere";
  case shard_state::held:
    return "held";
  case shard_state::blocked:
    return "blocked";
  case shard_state::invoking:
    return "invoking";
  case shard_state::backoff:
    return "backoff";
  case shard_state::due:
    return "due";
  case shard_state::waiting:
    return "waiting";
  case shard_state::idle:
    return "idle";
  }
  return "idle";
}

bool is_shard_state(std::string_view word) {
  for (auto s : all_shard_states)
    if (state_name(s) == word) return true;
  return false;
}

}  // namespace fusee::server
