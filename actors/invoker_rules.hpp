// The invoker's decisions as pure functions (no actors, no clocks), so they are tested directly:
// backoff, the choice of endpoint, and the grouping of due shards into invocations.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "protocol/splitmix64.hpp"

namespace fusee::server::rules {

using ms = std::chrono::milliseconds;

/// Endpoint failures in a row and crashed shards: 100 ms doubling to 30 s.
inline constexpr ms failure_base{100}, failure_cap{30000};
/// A shard handed back with its budget spent and no step done: 1 s doubling to 300 s.
inline constexpr ms no_progress_base{1000}, no_progress_cap{300000};

/// While an endpoint backs off, shards a call waits for are still sent now and then: one
/// invocation at a time, once nothing was sent to it or ended for probe_every (a half-open
/// circuit). So a handler that came back serves the next call within a second or so, not after
/// the rest of a backoff that may outlast the call's parking (`park_ms`, 30 s: the cap with its
/// jitter is 36 s).
inline constexpr ms probe_every{1000};

/// Whether an endpoint backing off may be sent a probe now: a call waits in its queue, no probe
/// of it is in flight, and its last invocation was sent or ended at least probe_every ago.
template <class TimePoint>
bool may_probe(bool call_waiting, bool probe_in_flight, TimePoint last_activity, TimePoint now) {
  return call_waiting && !probe_in_flight && now - last_activity >= probe_every;
}

/// Shards that become ready for a timer, a handback, recovery or code wait this long for others
/// to group with them: timers armed together fire over a spread, and without the window a storm
/// of them would leave as many small invocations. Calls and messages never wait.
inline constexpr ms gather_window{2};

/// base · 2^(failures − 1), at most `cap`, then ±20 % jitter taken from `random_bits`.
ms backoff(uint32_t failures, ms base, ms cap, uint64_t random_bits);

/// Whether a failed invocation sent at `sent` is one more failure "in a row" for its endpoint,
/// which has `failures` in a row so far, the last counted when seen at `last_counted`. The
/// invocations in flight together when an endpoint breaks (or a burst of bad luck hits) fail
/// together: they are one failure, not a run of them, so only an invocation sent after the last
/// counted failure lengthens the backoff. (Any success ends it, whenever it was sent: counting
/// only later ones made an endpoint failing one POST in five back off to the cap, since every
/// wave of concurrent POSTs had one failure that counted and its successes did not.)
template <class TimePoint>
bool counts_in_a_row(uint32_t failures, TimePoint sent, TimePoint last_counted) {
  return failures == 0 || sent > last_counted;
}

/// The earliest pending wake-up of an actor whose delayed_send can't be cancelled: each tick
/// carries the generation it was armed with, and only the newest counts.
struct earliest_timer {
  using time_point = std::chrono::steady_clock::time_point;
  bool armed = false;
  time_point at{};
  uint64_t generation = 0;
  /// The generation to send a tick with for `when` (never 0), or 0 if an earlier tick is
  /// already pending (it re-evaluates and arms again).
  uint64_t arm(time_point when) {
    if (armed && at <= when) return 0;
    armed = true;
    at = when;
    return ++generation;
  }
  /// True if the tick armed with `g` is the pending one; nothing is armed afterwards.
  bool fire(uint64_t g) {
    if (!armed || g != generation) return false;
    armed = false;
    return true;
  }
};

using proto::splitmix64;  ///< jitter (8 bytes of state, so every wake record can own one)

/// The endpoint for a shard's next invocation, as the original invoker chose it: one whose types
/// include a waiting start's type; else one (other than the last) with code for a type the last
/// holder lacked; else the last endpoint; else the first with no types; else the first.
int choose_endpoint(const std::vector<std::vector<std::string>>& endpoint_types,
                    const std::vector<std::string>& starts,
                    const std::vector<std::string>& awaiting, int last_endpoint);

/// How long a POST may take to be answered: budget + grace, saturating (u32 max: ~49 days).
uint32_t answer_deadline_ms(uint32_t budget_ms, uint32_t grace_ms);

/// How long an invocation's POST may wait for one of the node's connections before it is not sent
/// at all: the budget counts from the invocation, so a POST begun later would wake a worker with
/// (almost) nothing left to work; the last tenth of the budget, at most 1 s, is too late.
uint32_t send_within_ms(uint32_t budget_ms);

/// The most shards in one invocation for an endpoint's `max_shards` (0 = none of its own) on a
/// node of `max_frame_mb`: never more than proto::max_invocation_shards, so its IDLE fits a frame.
/// The scheduler keeps this as each endpoint's max_shards (never 0).
uint32_t invocation_shards(uint32_t max_shards, uint32_t max_frame_mb);

/// Due shards for one endpoint as invocations: at most `free_slots` groups of at most
/// `max_shards` shards each (0 = no limit), in order; shards that do not fit wait. Packed, not
/// spread over the free slots as the original invoker does: here due shards reach the scheduler
/// over time (each wake record tells it on its own), and a dispatch that spread the few it found
/// over plenty of free slots sent small invocations by the hundred thousand in a million-shard
/// start-up (docs/operations.md, "Endpoints").
std::vector<std::vector<uint32_t>> group(const std::vector<uint32_t>& shards, uint32_t free_slots,
                                         uint32_t max_shards);

}  // namespace fusee::server::rules
