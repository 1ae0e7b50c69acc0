// An inspector query from key=value pairs: the one parser behind the admin server's query strings
// (/v1/actors?kind=endpoint) and `fusee inspect`'s flags (--kind endpoint), so both accept the
// same words and refuse the same mistakes with the same messages.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/inspect/stats.hpp"
#include "protocol/result.hpp"

namespace fusee::server {

/// Actor kinds, in the order rows are listed.
const std::vector<std::string>& actor_kinds();
/// Every state word some kind reports (docs/operations.md).
const std::vector<std::string>& state_words();

/// Keys: kind, shard (n or a-b), state, top (mailbox), offset, limit, deadline_ms, grid (0/1),
/// every (0/1), sample (n). Unknown keys, kinds, states and malformed numbers are refused by name.
proto::result<inspect_query> parse_query(const std::map<std::string, std::string>& args);

/// "no shard N on this node (it has M)" when `q` starts at a shard past the node's `shards` (the
/// admin's 404, `fusee inspect`'s exit 1); a range's end past the last shard is only cut.
std::optional<std::string> missing_shard(const inspect_query& q, uint32_t shards);

/// Every actor of a node but its shards (cheap at any shard count): what /v1/overview and
/// a cluster-wide inspection without filters show of each node.
inline inspect_query node_actors_query() {
  inspect_query q;
  q.shard_from = 1;  // no shard
  q.shard_to = 0;
  q.limit = 500;
  return q;
}

}  // namespace fusee::server
