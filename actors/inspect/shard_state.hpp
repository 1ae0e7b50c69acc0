// A shard's state as operators see it (dashboard grid, `--state`, /v1/shards), derived from the
// directory's and the scheduler's views alone, so 100,000 shards cost no message each.
#pragma once

#include <string_view>

#include "actors/inspect/stats.hpp"

namespace fusee::server {

/// In order of precedence: another node of the cluster serves it (this node forwards its calls
/// there); a worker holds it; the log failed and no holder can come before a restart; it is in an
/// invocation; it is due but backing off; due now (ready
/// to invoke, or a call or message waits for a holder); due later (a timer); nothing due. The
/// value is the shard's character in the dashboard's grid.
enum class shard_state : char {
  elsewhere = '-',
  held = 'H',
  blocked = 'X',
  invoking = 'I',
  backoff = 'B',
  due = 'D',
  waiting = 'W',
  idle = '.',
};

/// Every state, in the order above.
inline constexpr shard_state all_shard_states[] = {
    shard_state::elsewhere, shard_state::held, shard_state::blocked, shard_state::invoking,
    shard_state::backoff,   shard_state::due,  shard_state::waiting, shard_state::idle};

/// What a shard's state needs of the directory's view, in one byte (the bulk view of a range:
/// a million shards cost a megabyte, not 40).
namespace lease_mark {
inline constexpr uint8_t elsewhere = 1, held = 2, blocked = 4, parked = 8;
}
uint8_t lease_mark_of(const shard_lease_view& lease);
/// ... and of the scheduler's: its shard_status, with this bit when in an invocation.
inline constexpr uint8_t invoking_mark = 0x80;
uint8_t invoker_mark_of(const shard_invoker_view& invoker);

/// From the two bytes; `invoker` is -1 when the node runs no invoker (or its view did not come).
shard_state state_of(uint8_t lease, int invoker);
/// The same from the full views; `invoker` is null when the node runs no invoker.
shard_state state_of(const shard_lease_view& lease, const shard_invoker_view* invoker);
std::string_view state_name(shard_state s);
/// True if `word` names a shard state ("held", "invoking", ...).
bool is_shard_state(std::string_view word);

}  // namespace fusee::server
