#include "actors/directory.hpp"

#include <deque>
#include <map>
#include <set>
#include <unordered_map>

#include "actors/atoms.hpp"
#include "actors/invoker_interface.hpp"
#include "actors/lease_rules.hpp"
#include "actors/wal_writer.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/json_text.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

namespace {

using proto::bytes;

struct lease_slot {
  session_id holder = 0;
  caf::actor holder_actor;
  epoch_t epoch{};
  bool serve_calls = false;
  bool draining = false;  ///< DRAIN: no more calls or messages to this holder
  bool busy = false;      ///< a grant or revocation is in the log
};

struct worker {
  caf::actor actor;
  uint64_t order = 0;  ///< connection order, for standby grants
  uint32_t max_shards = 0;
  uint32_t pending = 0;
  bool serve_calls = false;
  uint64_t hello_id = 0;
  bool answered = false;  ///< LEASE sent
  std::vector<proto::grant_entry> initial;
  std::set<uint32_t> held;
  std::set<uint32_t> released;  ///< given back by RELEASE: never offered again to this worker
  uint64_t invocation = 0;      ///< an invoked worker's invocation; 0 = a long-lived worker
  uint32_t remaining_ms = 0;    ///< budget left when bound
  int32_t endpoint = -1;        ///< the invocation's endpoint index, -1 = not invoked
  std::vector<std::pair<uint64_t, std::vector<uint32_t>>> drains;  ///< DRAIN ids waiting
};

/// What an invoked worker's IDLE said about one shard, kept until its lease ends.
struct idle_report {
  session_id session = 0;
  proto::idle_entry entry;
};

struct parked_call {
  caf::actor client;
  uint64_t request_id = 0;
  std::string method, type;
  bytes args;
  uint64_t seq = 0;
};

struct inflight_call {
  caf::actor client;
  uint64_t request_id = 0;
  session_id holder = 0;
  uint32_t shard = 0;
};

struct parked_message {
  uint32_t from = 0;
  uint64_t from_epoch = 0;
  uint64_t outbox_id = 0;
  bytes payload;
};

struct pending_revoke {
  uint32_t shard = 0;
  caf::actor answer_to;  ///< RELEASE answers OK once the revocation is through the log
  uint64_t request_id = 0;
};

struct directory_state {
  directory_config cfg;
  wal_writer* wal = nullptr;
  std::vector<lease_slot> slots;
  /// Bit s set <=> slot s has no holder and nothing in the log (kept by refresh_free()), so
  /// offering free shards costs shards/64 words, not one look per shard.
  std::vector<uint64_t> free_bits;
  std::unordered_map<session_id, worker> workers;
  uint64_t next_order = 1;
  uint64_t next_token = 1;
  std::unordered_map<uint64_t, std::pair<session_id, uint32_t>> pending_grants;
  std::unordered_map<uint64_t, pending_revoke> pending_revokes;
  // Only shards with something parked have an entry (100,000 empty deques would cost ~100 MB).
  std::unordered_map<uint32_t, std::deque<parked_call>> parked_calls;
  std::unordered_map<uint32_t, std::deque<parked_message>> parked_messages;
  std::unordered_map<uint64_t, inflight_call> inflight;
  uint64_t next_relay = 1;
  uint64_t next_call_seq = 1;
  scheduler_actor scheduler;      ///< the invoker; null when no endpoint is configured
  std::vector<shard_actor> wake;  ///< the shards' wake records (the invoker's), by shard
  std::unordered_map<uint32_t, idle_report> reports;
  static inline const char* name = "directory";
};

using self_ptr = caf::stateful_actor<directory_state>*;

void send_frame(const caf::actor& to, const proto::any_message& m) {
  caf::anon_send(to, write_atom::value, proto::encode(m));
}

bytes error_json(const std::string& message) {
  auto s = proto::json_error(message);
  return bytes(s.begin(), s.end());
}

void answer_call(const caf::actor& client, uint64_t id, proto::call_status st, bytes body) {
  send_frame(client, proto::call_result{id, static_cast<uint8_t>(st), std::move(body)});
}

/// Refusal for a shard request by `s` under `epoch`, judged by the directory's view.
std::optional<proto::error> check(directory_state& st, session_id s, uint32_t shard,
                                  uint64_t epoch) {
  if (shard >= st.slots.size())
    return proto::error{proto::err_code::bad_body, "no shard " + std::to_string(shard)};
  auto& slot = st.slots[shard];
  return refuse_shard_request(shard, epoch_t{epoch}, slot.epoch, slot.holder != 0,
                              slot.holder == s);
}

/// True if `s` holds `shard` under `epoch`; otherwise answers the request with ERR.
bool admit(directory_state& st, session_id s, const caf::actor& session, uint64_t req,
           uint32_t shard, uint64_t epoch) {
  auto err = check(st, s, shard, epoch);
  if (err) send_frame(session, proto::make_err(req, *err));
  return !err;
}

void dispatch_call(directory_state& st, uint32_t shard, parked_call&& c) {
  auto& slot = st.slots[shard];
  uint64_t relay = st.next_relay++;
  st.inflight[relay] = inflight_call{c.client, c.request_id, slot.holder, shard};
  send_frame(slot.holder_actor, proto::relayed_call{0, relay, shard_id{shard}, std::move(c.method),
                                                    std::move(c.type), std::move(c.args)});
}

void flush_parked(directory_state& st, uint32_t shard) {
  auto& slot = st.slots[shard];
  if (slot.holder == 0 || !slot.serve_calls || slot.draining) return;
  if (auto i = st.parked_calls.find(shard); i != st.parked_calls.end()) {
    auto calls = std::move(i->second);
    st.parked_calls.erase(i);
    for (auto& c : calls)
      dispatch_call(st, shard, std::move(c));
  }
  auto i = st.parked_messages.find(shard);
  if (i == st.parked_messages.end()) return;
  auto msgs = std::move(i->second);
  st.parked_messages.erase(i);
  for (auto& m : msgs)
    send_frame(slot.holder_actor,
               proto::message{0, shard_id{shard}, shard_id{m.from}, epoch_t{m.from_epoch},
                              m.outbox_id, std::move(m.payload)});
}

uint32_t capacity(const worker& w) {
  if (w.max_shards == 0) return UINT32_MAX;
  uint32_t used = static_cast<uint32_t>(w.held.size()) + w.pending;
  return used >= w.max_shards ? 0 : w.max_shards - used;
}

/// Call after changing a slot's holder or busy flag.
void refresh_free(directory_state& st, uint32_t shard) {
  auto& slot = st.slots[shard];
  uint64_t bit = uint64_t{1} << (shard % 64);
  if (slot.holder == 0 && !slot.busy)
    st.free_bits[shard / 64] |= bit;
  else
    st.free_bits[shard / 64] &= ~bit;
}

/// Calls f(shard) for each free shard in ascending order while f returns true. f may take the
/// shard (the bit it clears is in a word already read).
template <class F>
void for_each_free(const directory_state& st, F f) {
  for (size_t i = 0; i < st.free_bits.size(); ++i)
    for (uint64_t word = st.free_bits[i]; word != 0; word &= word - 1)
      if (!f(static_cast<uint32_t>(i * 64 + static_cast<size_t>(__builtin_ctzll(word))))) return;
}

void grant(directory_state& st, session_id s, worker& w, uint32_t shard) {
  auto& slot = st.slots[shard];
  slot.busy = true;
  refresh_free(st, shard);
  w.pending++;
  uint64_t token = st.next_token++;
  st.pending_grants[token] = {s, shard};
  st.wal->submit(wal_grant{token, s, shard_id{shard}});
}

/// Gives free shards to waiting workers in connection order.
void offer_free(directory_state& st) {
  std::vector<std::pair<uint64_t, session_id>> order;
  for (auto& [s, w] : st.workers)  // invoked workers never get shards later
    if (w.answered && w.invocation == 0 && capacity(w) > 0) order.emplace_back(w.order, s);
  if (order.empty()) return;  // nobody could take a shard: no scan (invoked-only deployments)
  std::sort(order.begin(), order.end());
  for_each_free(st, [&](uint32_t shard) {
    bool room = false;
    for (auto& [o, s] : order) {
      auto& w = st.workers[s];
      if (capacity(w) == 0 || w.released.count(shard)) continue;
      grant(st, s, w, shard);
      room = true;
      break;
    }
    for (auto& [o, s] : order)  // stop once nobody can take more
      room = room || capacity(st.workers[s]) > 0;
    return room;
  });
}

/// The endpoint that invoked worker `s`, -1 if it was not invoked.
int32_t endpoint_of(const directory_state& st, session_id s) {
  auto w = st.workers.find(s);
  return w == st.workers.end() ? -1 : w->second.endpoint;
}

/// Ends `shard`'s lease in the directory at once and in the log in order.
/// Tells the invoker how a lease ended: with the holder's IDLE report for it, or without one
/// (a crash, a revocation, a worker that never reports).
void report_end(directory_state& st, uint32_t shard, session_id holder, epoch_t epoch,
                bool invoked) {
  auto r = st.reports.find(shard);
  bool reported =
      r != st.reports.end() && r->second.session == holder && r->second.entry.epoch == epoch;
  if (shard < st.wake.size()) {
    lease_end end;
    end.invoked = invoked;
    if (reported) {
      auto& e = r->second.entry;
      end.flags = e.flags;
      end.due_in_ms = e.due_in_ms;
      end.steps = e.steps;
      end.open_us = e.open_us;
      end.types = e.types;
    } else {
      end.crashed = true;
    }
    caf::anon_send(st.wake[shard], report_atom::value, std::move(end));
    // Work that arrived while the holder drained is still waiting for the next holder.
    if (auto c = st.parked_calls.find(shard); c != st.parked_calls.end() && !c->second.empty())
      caf::anon_send(st.wake[shard], due_atom::value, uint8_t{proto::reason_call},
                     c->second.front().type);
    if (st.parked_messages.count(shard))
      caf::anon_send(st.wake[shard], due_atom::value, uint8_t{proto::reason_message},
                     std::string{});
  }
  if (r != st.reports.end()) st.reports.erase(r);
}

void revoke(directory_state& st, uint32_t shard, caf::actor answer_to = {}, uint64_t req = 0,
            bool invoked_holder = false) {
  auto& slot = st.slots[shard];
  session_id holder = slot.holder;
  if (auto w = st.workers.find(holder); w != st.workers.end())
    invoked_holder = w->second.invocation != 0;
  if (holder != 0) report_end(st, shard, holder, slot.epoch, invoked_holder);
  slot.draining = false;
  uint64_t token = st.next_token++;
  st.pending_revokes[token] = pending_revoke{shard, std::move(answer_to), req};
  slot.busy = true;
  st.wal->submit(wal_revoke{token, shard_id{shard}, slot.epoch, holder});
  slot.holder = 0;
  refresh_free(st, shard);
  slot.holder_actor = caf::actor{};
  slot.serve_calls = false;
  if (auto w = st.workers.find(holder); w != st.workers.end()) w->second.held.erase(shard);
  // Calls in flight to the lost holder may have run: say so.
  for (auto i = st.inflight.begin(); i != st.inflight.end();) {
    if (i->second.holder == holder && i->second.shard == shard) {
      answer_call(i->second.client, i->second.request_id, proto::call_status::holder_lost,
                  error_json("the holder of shard " + std::to_string(shard) +
                             " was lost while the call was in flight; it may have run"));
      i = st.inflight.erase(i);
    } else {
      ++i;
    }
  }
}

void drop_worker(directory_state& st, session_id s) {
  auto it = st.workers.find(s);
  if (it == st.workers.end()) return;
  auto held = it->second.held;
  bool invoked = it->second.invocation != 0;
  st.workers.erase(it);
  for (auto shard : held)
    revoke(st, shard, {}, 0, invoked);
}

}  // namespace

/// Answers the DRAINs of session `s` whose calls routed before them are all answered.
void answer_drains(directory_state& st, session_id s) {
  auto w = st.workers.find(s);
  if (w == st.workers.end()) return;
  auto& drains = w->second.drains;
  for (auto i = drains.begin(); i != drains.end();) {
    bool busy = false;
    for (auto& [relay, c] : st.inflight)
      if (c.holder == s &&
          std::find(i->second.begin(), i->second.end(), c.shard) != i->second.end())
        busy = true;
    if (busy) {
      ++i;
      continue;
    }
    send_frame(w->second.actor, proto::ok{i->first, {}});
    i = drains.erase(i);
  }
}

caf::behavior directory_fn(self_ptr self, directory_config cfg, wal_writer* wal) {
  auto& st = self->state;
  st.cfg = cfg;
  st.wal = wal;
  st.slots.resize(cfg.shards);
  st.free_bits.assign((cfg.shards + 63) / 64, 0);
  for (uint32_t s = 0; s < cfg.shards; ++s) {
    st.slots[s].epoch = wal->recovered_epoch(shard_id{s});
    refresh_free(st, s);
  }
  return {
      [=](hello_atom, uint64_t s, caf::actor session, uint64_t req, uint32_t max_shards,
          uint32_t offers, uint64_t invocation) {
        auto& st = self->state;
        auto start = [=](std::vector<uint32_t> only, uint32_t remaining_ms, int32_t endpoint) {
          auto& st = self->state;
          auto& w = st.workers[s];
          w.actor = session;
          w.order = st.next_order++;
          w.max_shards = max_shards;
          w.serve_calls = (offers & proto::offer_serve_calls) != 0;
          w.hello_id = req;
          w.invocation = invocation;
          w.remaining_ms = remaining_ms;
          w.endpoint = endpoint;
          auto offer = [&](uint32_t shard) {
            auto& slot = st.slots[shard];
            if (slot.holder == 0 && !slot.busy) grant(st, s, w, shard);
          };
          if (invocation == 0) {  // every free shard, up to max_shards
            for_each_free(st, [&](uint32_t shard) {
              if (capacity(w) == 0) return false;
              offer(shard);
              return true;
            });
          } else {  // exactly the invocation's free shards: O(its shards), not O(all shards)
            std::sort(only.begin(), only.end());
            only.erase(std::unique(only.begin(), only.end()), only.end());
            for (auto shard : only)
              if (shard < st.slots.size() && capacity(w) > 0) offer(shard);
          }
          if (w.pending == 0) {
            w.answered = true;
            send_frame(session, proto::lease{req,
                                             st.cfg.shards,
                                             st.cfg.ping_interval_ms,
                                             st.cfg.timeout_ms,
                                             remaining_ms,
                                             {}});
          }
        };
        if (invocation == 0) {
          start({}, 0, -1);
          return;
        }
        auto refuse = [=](proto::err_code code, std::string why) {
          caf::anon_send(session, close_atom::value,
                         proto::encode(proto::make_err(req, proto::error{code, std::move(why)})));
        };
        auto name = proto::format_invocation_id(proto::invocation_id{invocation});
        if (!st.scheduler) {
          refuse(proto::err_code::unknown_invocation,
                 "invocation " + name + " is unknown: this server has no endpoints");
          return;
        }
        self->request(st.scheduler, std::chrono::seconds(5), bind_atom::value, invocation, s)
            .then(
                [=](uint32_t code, std::vector<uint32_t>& shards, uint32_t remaining_ms,
                    int32_t endpoint) {
                  if (code == 7)
                    refuse(proto::err_code::unknown_invocation,
                           "invocation " + name + " is unknown or already over");
                  else if (code == 8)
                    refuse(proto::err_code::invocation_taken,
                           "another connection already answers invocation " + name);
                  else
                    start(std::move(shards), remaining_ms, endpoint);
                },
                [=](caf::error&) {
                  refuse(proto::err_code::unknown_invocation,
                         "invocation " + name + " could not be bound in time");
                });
      },
      [=](caf::put_atom, scheduler_actor& scheduler, std::vector<shard_actor>& wake) {
        // The invoker is up: every shard nobody holds is due once (`recovery`).
        auto& st = self->state;
        st.scheduler = std::move(scheduler);
        st.wake = std::move(wake);
        self->send(st.scheduler, caf::put_atom::value, st.wake);  // dispatching may start
        // Records start due; those of shards held already hear so (and then report idle).
        for (uint32_t shard = 0; shard < st.slots.size() && shard < st.wake.size(); ++shard)
          if (auto h = st.slots[shard].holder; h != 0)
            self->send(st.wake[shard], leased_atom::value, endpoint_of(st, h));
      },
      [=](drain_atom, uint64_t s, caf::actor session, uint64_t req,
          const std::vector<uint32_t>& shards) {
        auto& st = self->state;
        auto w = st.workers.find(s);
        for (auto shard : shards)
          if (shard < st.slots.size() && st.slots[shard].holder == s)
            st.slots[shard].draining = true;
        if (w == st.workers.end()) {
          send_frame(session, proto::ok{req, {}});
          return;
        }
        w->second.drains.emplace_back(req, shards);
        answer_drains(st, s);
      },
      [=](idle_atom, uint64_t s, caf::actor session, uint64_t req, const proto::bytes& body) {
        auto& st = self->state;
        auto m = proto::decode(static_cast<uint8_t>(proto::kind::idle), body);
        if (m)
          for (auto& e : std::get<proto::idle>(*m).entries)
            if (e.shard.value() < st.slots.size() && st.slots[e.shard.value()].holder == s &&
                st.slots[e.shard.value()].epoch == e.epoch)
              st.reports[e.shard.value()] = idle_report{s, e};
        send_frame(session, proto::ok{req, {}});
      },
      [=](fence_atom, uint64_t s) {
        // An invocation ended: the leases it still holds are revoked; the connection stays.
        auto& st = self->state;
        auto w = st.workers.find(s);
        if (w == st.workers.end() || w->second.held.empty()) return;
        proto::revoked r{0, {}, "the invocation ended"};
        auto held = w->second.held;
        for (auto shard : held)
          r.shards.push_back(proto::shard_epoch{shard_id{shard}, st.slots[shard].epoch});
        auto actor = w->second.actor;
        // The log hears of the revocation before the worker does, so anything the worker sends
        // after REVOKED is queued behind it and refused (STALE_EPOCH).
        for (auto shard : held)
          revoke(st, shard);
        send_frame(actor, r);
        offer_free(st);
      },
      [=](caf::get_atom) -> uint64_t {
        uint64_t n = 0;
        for (auto& [shard, q] : self->state.parked_calls)
          n += q.size();
        return n;
      },
      [=](granted_atom, const std::vector<grant_done>& done) {
        auto& st = self->state;
        std::map<session_id, std::vector<proto::grant_entry>> pushes;
        std::vector<session_id> leased;
        for (auto& g : done) {
          st.pending_grants.erase(g.token);
          auto& slot = st.slots[g.shard];
          slot.busy = false;
          auto w = st.workers.find(g.session);
          if (g.epoch == 0) {  // the log could not write the grant
            refresh_free(st, g.shard);
            if (w != st.workers.end()) w->second.pending--;
            continue;
          }
          slot.epoch = epoch_t{g.epoch};
          slot.holder = g.session;
          refresh_free(st, g.shard);
          if (w == st.workers.end()) {  // the worker left meanwhile: end the new lease at once
            revoke(st, g.shard);
            continue;
          }
          auto& wk = w->second;
          wk.pending--;
          wk.held.insert(g.shard);
          slot.holder_actor = wk.actor;
          slot.serve_calls = wk.serve_calls;
          proto::grant_entry e{shard_id{g.shard}, epoch_t{g.epoch}, lsn_t{g.durable_lsn}};
          if (!wk.answered) {
            wk.initial.push_back(e);
            if (wk.pending == 0) leased.push_back(g.session);
          } else {
            pushes[g.session].push_back(e);
          }
        }
        for (auto s : leased) {
          auto& wk = st.workers[s];
          wk.answered = true;
          if (wk.invocation != 0 && st.scheduler)
            self->send(st.scheduler, leased_atom::value, wk.invocation,
                       static_cast<uint32_t>(wk.initial.size()));
          send_frame(wk.actor,
                     proto::lease{wk.hello_id, st.cfg.shards, st.cfg.ping_interval_ms,
                                  st.cfg.timeout_ms, wk.remaining_ms, std::move(wk.initial)});
          wk.initial.clear();
        }
        for (auto& g : done)  // a leased shard is never due
          if (g.epoch != 0 && st.slots[g.shard].holder == g.session && g.shard < st.wake.size())
            self->send(st.wake[g.shard], leased_atom::value, endpoint_of(st, g.session));
        for (auto& [s, grants] : pushes)
          send_frame(st.workers[s].actor, proto::grant{0, std::move(grants)});
        for (auto& g : done)
          if (g.epoch != 0) flush_parked(st, g.shard);
        offer_free(st);
      },
      [=](revoked_atom, uint64_t token, uint32_t shard, uint64_t) {
        auto& st = self->state;
        auto i = st.pending_revokes.find(token);
        if (i != st.pending_revokes.end()) {
          if (i->second.answer_to)
            send_frame(i->second.answer_to, proto::ok{i->second.request_id, {}});
          st.pending_revokes.erase(i);
        }
        st.slots[shard].busy = false;
        refresh_free(st, shard);
        offer_free(st);
      },
      [=](release_atom, uint64_t s, caf::actor session, uint64_t req, uint32_t shard,
          uint64_t epoch) {
        auto& st = self->state;
        if (!admit(st, s, session, req, shard, epoch)) return;
        st.workers[s].released.insert(shard);
        revoke(st, shard, session, req);
      },
      [=](bye_atom, uint64_t s) {
        drop_worker(self->state, s);
        offer_free(self->state);
      },
      [=](timeout_atom, uint64_t s) {
        auto& st = self->state;
        auto it = st.workers.find(s);
        if (it == st.workers.end()) return;
        proto::revoked r{
            0, {}, "no frame for " + std::to_string(st.cfg.timeout_ms) + " ms: liveness timeout"};
        for (auto shard : it->second.held)
          r.shards.push_back(proto::shard_epoch{shard_id{shard}, st.slots[shard].epoch});
        caf::anon_send(it->second.actor, close_atom::value, proto::encode(r));
        drop_worker(st, s);
        offer_free(st);
      },
      [=](call_atom, caf::actor client, uint64_t req, uint32_t shard, std::string& method,
          std::string& type, bytes& args, uint32_t park_ms) {
        auto& st = self->state;
        if (shard >= st.slots.size()) {
          answer_call(client, req, proto::call_status::bad_request,
                      error_json("no shard " + std::to_string(shard) + " (there are " +
                                 std::to_string(st.slots.size()) + ")"));
          return;
        }
        parked_call c{
            client, req, std::move(method), std::move(type), std::move(args), st.next_call_seq++};
        auto& slot = st.slots[shard];
        if (slot.holder != 0 && slot.serve_calls && !slot.draining) {
          dispatch_call(st, shard, std::move(c));
          return;
        }
        if (slot.holder == 0 && shard < st.wake.size())  // parked: due (reason `call`)
          self->send(st.wake[shard], due_atom::value, uint8_t{proto::reason_call}, c.type);
        uint32_t wait = park_ms == 0 ? st.cfg.park_ms : std::min(park_ms, st.cfg.park_ms);
        self->delayed_send(self, std::chrono::milliseconds(wait), expire_atom::value, shard, c.seq);
        st.parked_calls[shard].push_back(std::move(c));
      },
      [=](expire_atom, uint32_t shard, uint64_t seq) {
        auto& parked = self->state.parked_calls;
        auto found = parked.find(shard);
        if (found == parked.end()) return;
        auto& q = found->second;
        for (auto i = q.begin(); i != q.end(); ++i)
          if (i->seq == seq) {
            answer_call(i->client, i->request_id, proto::call_status::parked_too_long,
                        error_json("no holder took shard " + std::to_string(shard) +
                                   " while the call was parked"));
            q.erase(i);
            if (q.empty()) parked.erase(found);
            return;
          }
      },
      [=](reply_atom, uint64_t s, caf::actor session, uint64_t req, uint32_t shard, uint64_t epoch,
          uint64_t relay, uint8_t ok, bytes& body) {
        auto& st = self->state;
        if (!admit(st, s, session, req, shard, epoch)) return;
        auto i = st.inflight.find(relay);
        if (i == st.inflight.end() || i->second.holder != s)
          return;  // unknown or already answered: ignored
        answer_call(i->second.client, i->second.request_id,
                    ok ? proto::call_status::ok : proto::call_status::failed, std::move(body));
        st.inflight.erase(i);
        answer_drains(st, s);
      },
      [=](relay_atom, uint64_t s, caf::actor session, uint64_t req, uint32_t shard, uint64_t epoch,
          uint32_t target, uint64_t outbox, bytes& payload) {
        auto& st = self->state;
        if (!admit(st, s, session, req, shard, epoch)) return;
        if (target >= st.slots.size()) {
          send_frame(session, proto::make_err(req, proto::error{proto::err_code::bad_body,
                                                                "RELAY target shard " +
                                                                    std::to_string(target) +
                                                                    " does not exist"}));
          return;
        }
        auto& t = st.slots[target];
        if (t.holder != 0 && t.serve_calls && !t.draining) {
          send_frame(t.holder_actor, proto::message{0, shard_id{target}, shard_id{shard},
                                                    epoch_t{epoch}, outbox, std::move(payload)});
        } else {
          st.parked_messages[target].push_back(
              parked_message{shard, epoch, outbox, std::move(payload)});
          if (t.holder == 0 && target < st.wake.size())
            self->send(st.wake[target], due_atom::value, uint8_t{proto::reason_message},
                       std::string{});
        }
      },
      [=](msgack_atom, uint64_t s, caf::actor session, uint64_t req, uint32_t shard, uint64_t epoch,
          uint32_t from, uint64_t from_epoch, uint64_t outbox) {
        auto& st = self->state;
        if (!admit(st, s, session, req, shard, epoch)) return;
        if (from >= st.slots.size()) return;
        auto& f = st.slots[from];
        if (f.holder != 0 && f.epoch == epoch_t{from_epoch})
          send_frame(f.holder_actor, proto::ack{0, shard_id{from}, epoch_t{from_epoch}, outbox});
      },
  };
}

caf::actor spawn_directory(caf::actor_system& sys, directory_config cfg, wal_writer* wal) {
  return sys.spawn(directory_fn, cfg, wal);
}

}  // namespace fusee::server
