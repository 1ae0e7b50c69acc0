// The inspector's answers as JSON: the one rendering behind the admin server's /v1/actors,
// /v1/shards, /v1/endpoints, /v1/sessions, /v1/log and `fusee inspect --json`, so both say the
// same thing with the same keys (shapes in docs/operations.md, "Introspection").
#pragma once

#include <string>

#include "actors/cluster/cluster_interface.hpp"
#include "actors/inspect/stats.hpp"

namespace fusee::app {

/// {"kind":...,"id":...,"state":...,"mailbox":...,"answered":...,<the kind's keys>,
///  "histograms":{name:{"bounds":[...],"counts":[...],"count":n,"sum":s,"p50":..,"p99":..}}}
std::string row_json(const server::actor_stats& row);

/// {"node":...,"shards":n,"matched":m,"offset":o,"rows":[...],"states":{...},"kinds":[...],
///  "noAnswer":[...],"tookUs":t} plus "grid" when asked for.
std::string reply_json(const server::inspect_reply& reply, uint32_t offset);

/// [{"name":...,"state":"self|up|connecting|down|refused","error":...,"sinceMs":...,"cluster":...,
///   "listen":...,"http":...,"shards":"0-7","callsForwarded":n,"callsFailedFast":n,
///   "messagesForwarded":n}, ...]
std::string members_json(const std::vector<server::cluster_member>& members);

/// {"nodes":[{<member keys>,"answered":bool,"reason":...,"reply":<reply_json>}],"tookUs":t}
std::string cluster_json(const server::cluster_reply& reply, uint32_t offset);

}  // namespace fusee::app
