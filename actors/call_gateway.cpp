#include "actors/call_gateway.hpp"

#include <unordered_set>

#include <caf/all.hpp>

#include "actors/session.hpp"
#include "protocol/frame.hpp"

namespace fusee::server {

namespace {

struct gateway_state {
  gateway_state() = default;  // not an aggregate: CAF would build it from the self pointer
  directory_actor directory;
  call_results* sink = nullptr;
  session_id id = 0;
  std::unordered_set<uint64_t> waiting;
  static inline const char* name = "fusee.call_gateway";
};

using gateway_self = call_gateway_actor::stateful_pointer<gateway_state>;

/// A frame the directory sent (only CALL_RESULT is expected): to the sink, once per ticket.
void take_frame(gateway_self self, const proto::bytes& frame) {
  auto r = call_result_in(frame);
  if (!r || self->state.waiting.erase(r->id) == 0) return;
  self->state.sink->on_call_result(r->id, std::move(*r));
}

call_gateway_actor::behavior_type gateway(gateway_self self, directory_actor directory,
                                          call_results* sink) {
  self->state.directory = std::move(directory);
  self->state.sink = sink;
  self->state.id = new_session_id();
  return {
      [=](frame_atom, proto::bytes& frame) { take_frame(self, frame); },
      [=](close_atom, proto::bytes& frame) { take_frame(self, frame); },
      [=](overflow_atom) {},
      [=](gateway_call& c) {
        auto& st = self->state;
        st.waiting.insert(c.ticket);
        origin from{st.id,
                    caf::actor_cast<session_actor>(caf::actor_cast<caf::strong_actor_ptr>(self)),
                    c.ticket, c.shard, 0};
        self->send(st.directory, call_request{std::move(from), std::move(c.method),
                                              std::move(c.type), std::move(c.args), c.park_ms});
        self->delayed_send(self, std::chrono::milliseconds(c.deadline_ms),
                           gateway_deadline{c.ticket});
      },
      [=](gateway_deadline& d) {
        if (self->state.waiting.erase(d.ticket)) self->state.sink->on_call_result(d.ticket, {});
      },
      [=](stats_atom) {
        actor_stats a{"gateway", 0};
        a.state = "ok";
        a.mailbox = self->mailbox().size();
        a.num("callsWaiting", self->state.waiting.size());
        return a;
      },
  };
}

}  // namespace

std::optional<proto::call_result> call_result_in(const proto::bytes& frame) {
  proto::frame_decoder d;
  d.feed(frame);
  auto f = d.next();
  if (!f || !*f) return std::nullopt;
  auto m = proto::decode_response((*f)->kind, (*f)->body);
  auto* r = m ? std::get_if<proto::call_result>(&*m) : nullptr;
  if (r == nullptr) return std::nullopt;
  return std::move(*r);
}

call_gateway_actor spawn_call_gateway(caf::actor_system& sys, directory_actor directory,
                                      call_results* sink) {
  return sys.spawn(gateway, std::move(directory), sink);
}

}  // namespace fusee::server
