// The HTTP API's door to the directory: it sends CALLs as a client session would (without a
// socket) and hands each CALL_RESULT, or the passing of its deadline, to a call_results sink.
// The sink runs on the actor's thread and must not block.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "actors/directory_interface.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

/// One CALL from the HTTP API. `ticket` is the caller's id for it (unique while it waits).
struct gateway_call {
  uint64_t ticket = 0;
  uint32_t shard = 0;
  std::string method;
  std::string type;
  proto::bytes args;
  uint32_t park_ms = 0;
  uint32_t deadline_ms = 0;  ///< answered without a result after this long
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gateway_call& x) {
  return f(caf::meta::type_name("fusee.gateway_call"), x.ticket, x.shard, x.method, x.type, x.args,
           x.park_ms, x.deadline_ms);
}

/// The gateway's own timer: the call `ticket` waited its deadline.
struct gateway_deadline {
  uint64_t ticket = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, gateway_deadline& x) {
  return f(caf::meta::type_name("fusee.gateway_deadline"), x.ticket);
}

using call_gateway_actor = session_actor::extend<caf::reacts_to<gateway_call>,  ///< send a CALL
                                                 caf::reacts_to<gateway_deadline>>;  ///< own timer

/// Where the gateway's answers go.
class call_results {
public:
  virtual ~call_results() = default;
  /// The call's CALL_RESULT, or nullopt when its deadline passed first. Once per ticket.
  virtual void on_call_result(uint64_t ticket, std::optional<proto::call_result> result) = 0;
};

/// The CALL_RESULT in a frame the directory sent a socket-less session (the gateway, or a cluster
/// actor waiting for a forwarded call), or nullopt for any other frame.
std::optional<proto::call_result> call_result_in(const proto::bytes& frame);

/// `sink` must outlive the actor.
call_gateway_actor spawn_call_gateway(caf::actor_system& sys, directory_actor directory,
                                      call_results* sink);

}  // namespace fusee::server
