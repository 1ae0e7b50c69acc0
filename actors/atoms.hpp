// Atoms and message types exchanged by the server's actors. Registered once, in add_server_types().
// Include only from actor translation units: it pulls in CAF.
#pragma once

#include <cstdint>
#include <string>
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
using flush_atom = caf::atom_constant<caf::atom("flush")>;
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
using status_atom = caf::atom_constant<caf::atom("status")>;
using gather_atom = caf::atom_constant<caf::atom("gather")>;

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

/// How a lease ended, from the directory to the shard's wake record: with the holder's IDLE
/// report for the shard, or `crashed` (no report: a crash, a revocation, a silent worker).
struct lease_end {
  uint8_t flags = 0;
  uint64_t due_in_ms = UINT64_MAX;  ///< protocol's nothing_due
  uint64_t steps = 0;
  uint64_t open_us = 0;
  std::vector<std::string> types;  ///< types the holder had no code for
  bool crashed = false;
  bool invoked = false;  ///< the holder was an invoked worker
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lease_end& x) {
  return f(caf::meta::type_name("fusee.lease_end"), x.flags, x.due_in_ms, x.steps, x.open_us,
           x.types, x.crashed, x.invoked);
}

/// A wake record's state as the scheduler needs it. `state`: idle (nothing due, or leased),
/// waiting (due later), backoff (due, but backing off), ready (due now, for `endpoint`).
struct shard_status {
  enum : uint8_t { idle = 0, waiting = 1, backoff = 2, ready = 3 };
  enum : uint8_t { no_event = 0, handback = 1, crash = 2, no_progress = 3 };
  uint32_t shard = 0;
  uint8_t state = idle;
  uint8_t reasons = 0;
  int16_t endpoint = -1;
  uint8_t event = no_event;  ///< counted in the metrics
  bool operator==(const shard_status&) const = default;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_status& x) {
  return f(caf::meta::type_name("fusee.shard_status"), x.shard, x.state, x.reasons, x.endpoint,
           x.event);
}

/// A POST's completion, reported by the curl thread. status 0 = no HTTP answer (see error).
struct http_outcome {
  uint64_t id = 0;
  int64_t status = 0;
  std::string error;
  bool timed_out = false;
  double total_ms = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, http_outcome& x) {
  return f(caf::meta::type_name("fusee.http_outcome"), x.id, x.status, x.error, x.timed_out,
           x.total_ms);
}

inline void add_server_types(caf::actor_system_config& cfg) {
  cfg.add_message_type<grant_done>("fusee.grant_done");
  cfg.add_message_type<std::vector<grant_done>>("fusee.grant_done_list");
  cfg.add_message_type<lease_end>("fusee.lease_end");
  cfg.add_message_type<shard_status>("fusee.shard_status");
  cfg.add_message_type<http_outcome>("fusee.http_outcome");
}

}  // namespace fusee::server
