// The actor tests' CAF configuration: every server message type registered, and CAF's
// deterministic test scheduler, so nothing runs unless the test drives it and timers fire when it
// advances the clock.
#pragma once

#include <caf/all.hpp>

#include "actors/message_types.hpp"

namespace fusee::test {

struct deterministic_config : caf::actor_system_config {
  deterministic_config() {
    server::add_server_types(*this);
    set("scheduler.policy", caf::atom("testing"));
  }
};

}  // namespace fusee::test
