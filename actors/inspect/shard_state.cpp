#include "actors/inspect/shard_state.hpp"

#include "actors/invoker_interface.hpp"

namespace fusee::server {

shard_state state_of(const shard_lease_view& lease, const shard_invoker_view* invoker) {
  if (lease.elsewhere) return shard_state::elsewhere;
  if (lease.holder != 0) return shard_state::held;
  if (lease.blocked) return shard_state::blocked;
  if (invoker) {
    if (invoker->invocation != 0) return shard_state::invoking;
    switch (invoker->state) {
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
  if (lease.parked_calls > 0 || lease.parked_messages > 0) return shard_state::due;
  return shard_state::idle;
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
