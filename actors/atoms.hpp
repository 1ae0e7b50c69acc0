// Atoms and message types exchanged by the server's actors. Registered once, in add_server_types().
// Include only from actor translation units: it pulls in CAF.
#pragma once

#include <cstdint>
#include <vector>

#include <caf/all.hpp>

namespace fusee::server {

using hello_atom = caf::atom_constant<caf::atom("hello")>;
using bye_atom = caf::atom_constant<caf::atom("bye")>;
using timeout_atom = caf::atom_constant<caf::atom("timeout")>;
using granted_atom = caf::atom_constant<caf::atom("granted")>;
using revoked_atom = caf::atom_constant<caf::atom("revoked")>;
using release_atom = caf::atom_constant<caf::atom("release")>;
using call_atom = caf::atom_constant<caf::atom("call")>;
using reply_atom = caf::atom_constant<caf::atom("reply")>;
using relay_atom = caf::atom_constant<caf::atom("relay")>;
using msgack_atom = caf::atom_constant<caf::atom("msgack")>;
using expire_atom = caf::atom_constant<caf::atom("expire")>;
using write_atom = caf::atom_constant<caf::atom("write")>;
using queued_atom = caf::atom_constant<caf::atom("queued")>;
using close_atom = caf::atom_constant<caf::atom("close")>;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
// invoker
using due_atom = caf::atom_constant<caf::atom("due")>;
using leased_atom = caf::atom_constant<caf::atom("leased")>;
using report_atom = caf::atom_constant<caf::atom("report")>;
using invoke_atom = caf::atom_constant<caf::atom("invoke")>;
using httpdone_atom = caf::atom_constant<caf::atom("httpdone")>;
using bind_atom = caf::atom_constant<caf::atom("bind")>;
using ended_atom = caf::atom_constant<caf::atom("ended")>;
using fence_atom = caf::atom_constant<caf::atom("fence")>;
using fencelater_atom = caf::atom_constant<caf::atom("fencelater")>;
using idle_atom = caf::atom_constant<caf::atom("idle")>;
using drain_atom = caf::atom_constant<caf::atom("drain")>;
using metrics_atom = caf::atom_constant<caf::atom("metrics")>;

/// The log made a lease grant durable (epoch 0: it could not).
struct grant_done {
  uint64_t token = 0;
  uint64_t session = 0;
  uint32_t shard = 0;
  uint64_t epoch = 0;
  uint64_t durable_lsn = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, grant_done& x) {
  return f(caf::meta::type_name("fusee.grant_done"), x.token, x.session, x.shard, x.epoch,
           x.durable_lsn);
}

inline void add_server_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<grant_done>("fusee.grant_done");
  cfg.add_message_type<std::vector<grant_done>>("fusee.grant_done_list");
}

}  // namespace fusee::server
