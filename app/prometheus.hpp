// /metrics in the Prometheus text format (version 0.0.4), built from two inspector answers: the
// node's actors other than shards (every one asked), and the shards (states and mailboxes).
// Names carry their unit; counters end in _total; labels are kinds, states, roles, outcomes and
// endpoint indexes only, never shard or session ids (docs/operations.md lists every metric).
#pragma once

#include <string>

#include "actors/inspect/stats.hpp"

namespace fusee::app {

std::string render_metrics(const server::inspect_reply& actors,
                           const server::inspect_reply& shards);

}  // namespace fusee::app
