// The node's inspector: one actor that answers inspect_query by asking the other actors for
// their stats (fan-out with one deadline per query: an actor that does not answer in time is
// listed under no_answer and never holds the rest up) and by reading the directory's and the
// scheduler's bulk views of the shards, so states, filters and paging over 100,000 shards cost
// two messages plus one per shard on the page. It is published on `inspect_listen` for
// `fusee inspect` (a remote typed actor over CAF's middleman) and asked by the admin server.
#pragma once

#include <string>
#include <vector>

#include "actors/cluster/cluster_interface.hpp"
#include "actors/directory_interface.hpp"
#include "actors/inspect/stats.hpp"

namespace fusee::server {

class wal_writer;
class log_sink;

/// What every actor kind answers (the common part of their interfaces).
using stats_actor = caf::typed_actor<caf::replies_to<stats_atom>::with<actor_stats>>;

using inspector_actor = caf::typed_actor<
    caf::replies_to<inspect_query>::with<inspect_reply>,  ///< a query
                                                          /// The query on every node of the cluster
                                                          /// (this node alone outside one), through
                                                          /// their inspectors, with one deadline.
    caf::replies_to<members_atom, inspect_query>::with<cluster_reply>,
    caf::reacts_to<tick_atom, uint64_t>>;  ///< own timer: a query's deadline

/// What the inspector asks. `scheduler` and `records` are null without an invoker; `wal`
/// and `sessions` (the log's sink knows the open sessions) must outlive the actor.
struct inspector_targets {
  std::string node;
  uint32_t shards = 0;
  directory_actor directory;
  scheduler_actor scheduler;
  std::shared_ptr<wake_records> records;  ///< null without an invoker
  stats_actor gateway;                    ///< the HTTP API's call gateway; null when the API is off
  cluster_actor cluster;                  ///< the links to the other nodes; null outside a cluster
  wal_writer* wal = nullptr;
  log_sink* sessions = nullptr;
};

inspector_actor spawn_inspector(caf::actor_system& sys, inspector_targets targets);

/// The log's stats as an actor_stats row (kind "log"): it is a thread, not an actor.
actor_stats log_stats(const wal_writer& wal);

}  // namespace fusee::server
