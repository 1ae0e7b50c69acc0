#include "actors/directory.hpp"

#include "actors/wake_records.hpp"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <variant>

#include "actors/cluster/shard_owners.hpp"
#include "actors/inspect/shard_state.hpp"
#include "actors/lease_rules.hpp"
#include "actors/memory_trimmer.hpp"
#include "logging/logging.hpp"
#include "logging/warning_limiter.hpp"
#include "protocol/invocation_request.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

namespace {

using proto::bytes;
using proto::epoch_t;
using proto::shard_id;

struct lease_slot {
  session_id holder = 0;
  session_actor holder_actor;
  epoch_t epoch{};
  bool serve_calls = false;
  bool draining = false;  ///< DRAIN: no more calls or messages to this holder
  bool busy = false;      ///< a grant or revocation is in the log, or the log failed it
  bool granting = false;  ///< a grant is in the log (a bool: the slot stays 32 bytes)
  bool owned = true;      ///< this node serves the shard (always, outside a cluster)
  bool withheld = false;  ///< leased to nobody for now (cluster: withheld.hpp)
};
static_assert(sizeof(lease_slot) <= 32, "one per shard: a million shards hold a million slots");

struct worker {
  session_actor actor;
  uint64_t order = 0;  ///< connection order, for standby grants
  uint32_t max_shards = 0;
  uint32_t pending = 0;  ///< grants in the log
  bool serve_calls = false;
  uint64_t hello_id = 0;
  bool answered = false;  ///< LEASE sent
  bool fenced = false;    ///< its invocation ended: it holds nothing more
  bool overran = false;   ///< fenced because its invocation ran out budget + grace (lease_end)
  std::vector<proto::grant_entry> initial;
  std::set<uint32_t> held;
  std::set<uint32_t> released;  ///< given back by RELEASE: never offered again to this worker
  uint64_t invocation = 0;      ///< an invoked worker's invocation; 0 = a long-lived worker
  uint32_t remaining_ms = 0;    ///< budget left when bound
  int32_t endpoint_index = -1;  ///< the invocation's endpoint, -1 = not invoked
  invocation_actor endpoint;
  /// DRAINs waiting: the request's id and the first relay id routed after it (relay ids grow).
  std::vector<std::pair<uint64_t, uint64_t>> drains;
};

/// What the directory tells a wake record, held while the record is asked to rest.
struct record_due {
  uint8_t reasons = 0;
  std::string start_type;
};
struct record_undue {
  uint8_t reasons = 0;
};
struct record_leased {
  int32_t endpoint = -1;
};
using record_message = std::variant<record_due, record_undue, record_leased, lease_end>;

/// What a holder's IDLE said about one shard, kept until its lease ends.
struct idle_report {
  session_id session = 0;
  epoch_t epoch{};
  lease_end end;
};

struct parked_call {
  session_actor client;
  uint64_t request_id = 0;
  std::string method, type;
  bytes args;
  uint64_t seq = 0;
};

struct inflight_call {
  session_actor client;
  uint64_t request_id = 0;
  session_id holder = 0;
  uint32_t shard = 0;
};

/// A message waiting for its target's holder: a RELAY from this node or one from another node.
using parked_message = remote_message;

/// The MESSAGE frame that delivers `m` to its target's holder.
proto::message message_frame(remote_message&& m) {
  return proto::message{0,           shard_id{m.target},  shard_id{m.from}, epoch_t{m.from_epoch},
                        m.outbox_id, std::move(m.payload)};
}

/// A RELEASE answers OK once its revocation is through the log (ERR IO if the log failed).
struct revoke_answer {
  session_actor to;
  uint64_t request_id = 0;
};

struct directory_state {
  node_settings cfg;
  /// What is wrong with each endpoint that has trouble (endpoint_trouble), said to calls that
  /// expire while parked.
  std::map<uint32_t, std::string> endpoint_trouble;
  /// Shards whose last lease ended because its invocation ran out budget + grace after the lease
  /// (lease_end::overran): they back off, which calls that expire while parked for them are told.
  std::unordered_set<uint32_t> overran;
  lease_log* log = nullptr;
  std::vector<lease_slot> slots;
  /// Bit s set <=> slot s has no holder and nothing in the log (kept by refresh_free()), so
  /// offering free shards costs shards/64 words, not one look per shard.
  std::vector<uint64_t> free_bits;
  std::unordered_map<session_id, worker> workers;
  /// The long-lived workers (only they take shards later), in connection order: offer_free looks
  /// at these, not at every invoked worker (a timer storm connects thousands).
  std::set<std::pair<uint64_t, session_id>> long_lived;
  uint64_t next_order = 1;
  uint64_t next_token = 1;
  std::unordered_map<uint64_t, revoke_answer> revoke_answers;  ///< by revocation token
  /// How each lease being revoked ended, by revocation token: its wake record hears it once the
  /// log has made the revocation (until then the shard is busy: an invocation could lease
  /// nothing, and would be sent again and again).
  std::unordered_map<uint64_t, lease_end> ended;
  uint64_t revocations_in_log = 0;  ///< asked of the log, not yet through
  // Only shards with something parked have an entry (100,000 empty deques would cost ~100 MB).
  std::unordered_map<uint32_t, std::deque<parked_call>> parked_calls;
  std::unordered_map<uint32_t, std::deque<parked_message>> parked_messages;
  uint64_t parked_total = 0;  ///< calls and messages parked, all shards (limits.max_parked)
  std::unordered_map<uint64_t, inflight_call> inflight;
  uint64_t next_relay = 1;
  uint64_t next_call_seq = 1;
  shard_owners owners;
  withheld_shards withheld;     ///< as the cluster actor last said (starting_hold() at first)
  uint64_t withheld_count = 0;  ///< shards withheld now
  forwarder_actor forwarder;    ///< the other nodes (cluster_ready); null outside a cluster
  binder_actor scheduler;       ///< the invoker; null when no endpoint is configured
  std::shared_ptr<wake_records> wake;  ///< the shards' wake records (the invoker's); null: none
  /// Records asked to rest (wake_records.hpp): what they are told meanwhile waits here and goes to
  /// their next actor (or this one, if it declined) with the answer.
  std::unordered_map<uint32_t, std::vector<record_message>> retiring;
  caf::actor_clock::time_point period_started{};
  uint64_t records_retired = 0, retired_since_trim = 0;
  std::unique_ptr<memory_trimmer> trimmer;  ///< started at the first trim
  std::unordered_map<uint32_t, idle_report> reports;
  // counters for introspection and /metrics
  uint64_t leases_granted = 0, leases_revoked = 0, calls = 0, calls_parked = 0, calls_expired = 0,
           relays = 0, forwarded_calls = 0, forwarded_messages = 0, messages_in = 0,
           parked_refused = 0;
  /// Shards whose grant or revocation the log failed (it is broken until restart): busy for good,
  /// offered to nobody (a broken log and a standby would otherwise ask each other for ever).
  uint64_t shards_blocked = 0;
  /// The error line saying so: the first, then one a minute at most (add_blocked()).
  logging::warning_limiter blocked_lines{1};
  /// Why the log failed (log_failed's text), once it did; the invoker is halted with it
  /// (halt_invoker()).
  std::optional<std::string> log_failure;
  static inline const char* name = "directory";
};

using self_ptr = directory_actor::stateful_pointer<directory_state>;

/// Tells `shard`'s wake record `m` (if the invoker runs), spawning its actor if it has none.
void tell(self_ptr self, uint32_t shard, record_message m) {
  auto& st = self->state;
  if (!st.wake) return;
  if (auto r = st.retiring.find(shard); r != st.retiring.end()) {
    r->second.push_back(std::move(m));
    return;
  }
  auto rec = st.wake->get(shard);
  if (!rec) return;
  std::visit(
      [&](auto&& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, record_due>)
          self->send(rec, due_atom::value, x.reasons, std::move(x.start_type));
        else if constexpr (std::is_same_v<T, record_undue>)
          self->send(rec, undue_atom::value, x.reasons);
        else if constexpr (std::is_same_v<T, record_leased>)
          self->send(rec, leased_atom::value, x.endpoint);
        else
          self->send(rec, std::move(x));
      },
      std::move(m));
}

/// Nothing waits for `shard` for `reasons` any more (its parked calls or messages are gone): its
/// wake record stops being due for them. Told only where they made it due: no holder, and no
/// lease change in the log (which tells the record what is parked once it is made).
void tell_undue(self_ptr self, uint32_t shard, uint8_t reasons) {
  auto& slot = self->state.slots[shard];
  if (slot.holder == 0 && !slot.busy) tell(self, shard, record_undue{reasons});
}

/// What the scheduler is told once the log failed.
std::string halt_reason(const directory_state& st) {
  return "the log failed (" + st.log_failure.value_or("") + ")";
}

void send_frame(self_ptr self, const session_actor& to, const proto::any_message& m);

/// `n` more shards blocked by the failed log (shards_blocked): an error line with the total the
/// first time and then a minute or more after the last (a failed log reports its revocations
/// batch by batch: one line each would be thousands), the rest at debug.
void add_blocked(directory_state& st, size_t n) {
  st.shards_blocked += n;
  if (st.blocked_lines.admit("blocked"))
    spdlog::error("the log failed: shards stay without a holder until restart (their grant or "
                  "the end of their lease could not be written) shards_blocked={}",
                  st.shards_blocked);
  else
    spdlog::debug("the log failed: {} more shard(s) without a holder shards_blocked={}", n,
                  st.shards_blocked);
}

/// True once the log failed for `shard` without a holder and without a grant in the log that
/// may still make one: none can come before a restart.
bool no_holder_can_come(const directory_state& st, uint32_t shard) {
  return st.log_failure && st.slots[shard].holder == 0 && !st.slots[shard].granting;
}

/// What the inspector sees of `shard`, but its parked calls and messages (kept apart, by shard).
shard_lease_view view_of(const directory_state& st, uint32_t shard) {
  auto& slot = st.slots[shard];
  shard_lease_view v;
  v.holder = slot.holder;
  v.epoch = slot.epoch.value();
  v.serve_calls = slot.serve_calls;
  v.draining = slot.draining;
  v.busy = slot.busy;
  v.withheld = slot.withheld;
  v.elsewhere = !slot.owned;
  v.blocked = no_holder_can_come(st, shard);
  return v;
}

/// Answers a call for `shard` when no_holder_can_come: it is not parked to wait for one.
void answer_log_failed(self_ptr self, uint32_t shard, const parked_call& c) {
  self->state.parked_refused++;
  send_frame(self, c.client,
             proto::call_error(c.request_id, proto::call_status::parked_too_long,
                               "shard " + std::to_string(shard) + " has no holder and " +
                                   halt_reason(self->state) +
                                   ": no lease can be granted until the node restarts; the call "
                                   "did not run"));
}

/// The calls parked for `shard` answered now, if no_holder_can_come (see answer_log_failed).
void answer_parked_log_failed(self_ptr self, uint32_t shard) {
  auto& st = self->state;
  auto i = st.parked_calls.find(shard);
  if (i == st.parked_calls.end() || !no_holder_can_come(st, shard)) return;
  for (auto& c : i->second)
    answer_log_failed(self, shard, c);
  st.parked_total -= i->second.size();
  st.parked_calls.erase(i);
}

/// The log failed (broken until restart): no grant can be made any more, so an invoked worker
/// would find nothing to lease: the scheduler stops sending invocations (told at invoker_ready if
/// that comes later), and the calls parked for shards without a holder are answered now.
void halt_invoker(self_ptr self, std::string failure) {
  auto& st = self->state;
  if (st.log_failure) return;  // told once
  st.log_failure = std::move(failure);
  if (st.scheduler) self->send(st.scheduler, halt_atom::value, halt_reason(st));
  std::vector<uint32_t> parked;  // (answering erases from the map)
  for (auto& [shard, calls] : st.parked_calls)
    parked.push_back(shard);
  for (auto shard : parked)
    answer_parked_log_failed(self, shard);
}

/// Once 10,000 or more records retired and none is being asked: their actors' memory goes back
/// to the system, not only to malloc's free lists: on the trimmer's thread, so the directory's
/// mailbox does not wait behind it (here if that thread cannot start).
void trim_after_retiring(directory_state& st) {
  if (st.retired_since_trim < 10000 || !st.retiring.empty()) return;
  spdlog::debug("wake records retired={} actors={}; trimming", st.retired_since_trim,
                st.wake->actors());
  st.retired_since_trim = 0;
  if (!st.trimmer) {
    if (auto t = memory_trimmer::start()) {
      st.trimmer = std::move(*t);
    } else {
      spdlog::warn("{}; memory is trimmed on the directory's thread", t.err().message);
      ::malloc_trim(0);
      return;
    }
  }
  st.trimmer->request();
}

/// Quiet records are asked to rest 200 at a time, the next 200 20 ms after a full slice: at most
/// 10,000 a second, so a million quiet records leave over 100 s, not in one burst that would slow
/// a timer storm (at 50,000 a second its invocations went out 0.7-1 s later); and in slices, so
/// the directory's other messages never wait behind 10,000 answers (a burst of 10,000 a second
/// held a request to the directory up to 150-190 ms, p99 107-132 ms; in slices, p99 13-24 ms).
constexpr size_t retire_slice = 200;
constexpr auto retire_slice_gap = std::chrono::milliseconds(20);

/// Asks up to retire_slice records nothing was sent to for two periods (invoker.retire_idle_ms)
/// to rest. True if it found that many: more may be quiet.
bool retire_quiet(self_ptr self) {
  auto& st = self->state;
  if (!st.wake || st.cfg.retire_idle_ms == 0) return false;
  auto now = self->clock().now();
  if (now - st.period_started >= std::chrono::milliseconds(st.cfg.retire_idle_ms / 2)) {
    st.period_started = now;
    st.wake->advance_period();
  }
  auto quiet = st.wake->quiet(retire_slice);
  for (auto shard : quiet) {
    if (st.retiring.count(shard)) continue;
    auto rec = st.wake->find(shard);
    if (!rec) continue;
    st.retiring[shard];
    // `lost`: the record ended without answering (it answers at once, so no timeout: only the
    // invoker's shutdown ends records). Its dead handle is let go, not kept in the registry.
    auto done = [=](resting_record r, bool lost) {
      auto& st = self->state;
      auto held = std::move(st.retiring[shard]);
      st.retiring.erase(shard);
      if (r.stored || lost) st.wake->rest(shard, r);
      if (r.stored) {
        st.records_retired++;
        st.retired_since_trim++;
      }
      for (auto& m : held)
        tell(self, shard, std::move(m));
      trim_after_retiring(st);
    };
    self->request(rec, caf::infinite, retire_atom::value)
        .then([=](resting_record& r) { done(r, false); },
              [=](caf::error& e) {
                spdlog::debug("wake record shard={} ended before it rested: {}", shard,
                              self->system().render(e));
                done({}, true);
              });
  }
  trim_after_retiring(st);
  return quiet.size() == retire_slice;
}

void send_frame(self_ptr self, const session_actor& to, const proto::any_message& m) {
  self->send(to, frame_atom::value, proto::encode(m));
}

void answer_call(self_ptr self, const session_actor& client, uint64_t id, proto::call_status st,
                 bytes body) {
  send_frame(self, client, proto::call_result{id, static_cast<uint8_t>(st), std::move(body)});
}

/// A CALL_RESULT with status 2-4 and {"error": message}.
void answer_error(self_ptr self, const session_actor& client, uint64_t id, proto::call_status st,
                  const std::string& message) {
  send_frame(self, client, proto::call_error(id, st, message));
}

/// True if the asking connection holds `from.shard` under `from.epoch`; otherwise answers the
/// request with ERR (PROTOCOL.md §3: STALE_EPOCH or NOT_HOLDER, also for no such shard).
bool admit(self_ptr self, const origin& from) {
  auto& st = self->state;
  std::optional<proto::error> err;
  if (from.shard >= st.slots.size()) {
    err = unknown_shard(from.shard, st.slots.size());
  } else {
    auto& slot = st.slots[from.shard];
    err = refuse_shard_request(from.shard, epoch_t{from.epoch}, slot.epoch, slot.holder != 0,
                               slot.holder == from.session);
  }
  if (err) send_frame(self, from.reply_to, proto::make_err(from.request, *err));
  return !err;
}

void dispatch_call(self_ptr self, uint32_t shard, parked_call&& c) {
  auto& st = self->state;
  auto& slot = st.slots[shard];
  uint64_t relay = st.next_relay++;
  st.inflight[relay] = inflight_call{c.client, c.request_id, slot.holder, shard};
  send_frame(self, slot.holder_actor,
             proto::relayed_call{0, relay, shard_id{shard}, std::move(c.method), std::move(c.type),
                                 std::move(c.args)});
}

bool takes_calls(const lease_slot& slot) {
  return slot.holder != 0 && slot.serve_calls && !slot.draining;
}

void flush_parked(self_ptr self, uint32_t shard) {
  auto& st = self->state;
  auto& slot = st.slots[shard];
  if (!takes_calls(slot)) return;
  if (auto i = st.parked_calls.find(shard); i != st.parked_calls.end()) {
    auto calls = std::move(i->second);
    st.parked_calls.erase(i);
    st.parked_total -= calls.size();
    for (auto& c : calls)
      dispatch_call(self, shard, std::move(c));
  }
  auto i = st.parked_messages.find(shard);
  if (i == st.parked_messages.end()) return;
  auto msgs = std::move(i->second);
  st.parked_messages.erase(i);
  st.parked_total -= msgs.size();
  for (auto& m : msgs)
    send_frame(self, slot.holder_actor, message_frame(std::move(m)));
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
  if (slot.holder == 0 && !slot.busy && slot.owned && !slot.withheld)
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
  slot.granting = true;
  refresh_free(st, shard);
  // The first grant of a burst may be made at once (no hand-off to the log's thread: a cold
  // wake's LEASE); the rest of the burst goes through the queue, answered in one batch.
  bool first = w.pending++ == 0;
  auto token = st.next_token++;
  if (!first || !st.log->grant_at_once(token, s, shard_id{shard}))
    st.log->grant(token, s, shard_id{shard});
}

/// Gives free shards to waiting long-lived workers in connection order.
void offer_free(directory_state& st) {
  std::vector<std::pair<uint64_t, session_id>> order;
  for (auto& [o, s] : st.long_lived)  // invoked workers never get shards later
    if (auto& w = st.workers[s]; w.answered && capacity(w) > 0) order.emplace_back(o, s);
  if (order.empty()) return;  // nobody could take a shard: no scan (invoked-only deployments)
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

/// How `holder`'s lease of `shard` ended, for the invoker: with its IDLE report for it, or
/// without one (a crash, a revocation, a worker that never reports); the report is used up. An
/// invoked worker's report also goes to its invocation's endpoint now (steps and open time are
/// its metrics). `holders_fault` false: the end is this node's doing (a withholding), so an
/// invoked worker's unreported end is not counted as its crash (no backoff). Nothing if the
/// invoker does not run.
std::optional<lease_end> end_of(self_ptr self, uint32_t shard, const worker* holder,
                                session_id holder_id, epoch_t epoch, bool holders_fault = true) {
  auto& st = self->state;
  auto r = st.reports.find(shard);
  bool reported =
      r != st.reports.end() && r->second.session == holder_id && r->second.epoch == epoch;
  std::optional<lease_end> end;
  if (st.wake) {
    end.emplace();
    if (reported) {
      *end = r->second.end;
    } else {
      end->crashed = true;
      end->overran = holder != nullptr && holder->overran;
    }
    end->invoked = holder != nullptr && holder->invocation != 0;
    if (reported && end->invoked && holder->endpoint)
      self->send(holder->endpoint, shard_reported{end->steps, end->open_us});
    end->holders_fault = holders_fault;
  }
  if (r != st.reports.end()) st.reports.erase(r);
  return end;
}

/// Tells `shard`'s wake record, once the log has made the revocation (or failed it: the halted
/// invoker sends nothing then), how its lease ended (if it had a holder) and what waits for the
/// next holder: calls and messages parked meanwhile.
void tell_revoked(self_ptr self, uint32_t shard, std::optional<lease_end> end) {
  auto& st = self->state;
  if (!st.wake) return;
  if (end) tell(self, shard, std::move(*end));
  if (auto c = st.parked_calls.find(shard); c != st.parked_calls.end()) {
    std::vector<const std::string*> told;  // each start type waiting, once (they route the POST)
    for (auto& call : c->second)
      if (std::none_of(told.begin(), told.end(), [&](auto* t) { return *t == call.type; })) {
        told.push_back(&call.type);
        tell(self, shard, record_due{proto::reason_call, call.type});
      }
  }
  if (st.parked_messages.count(shard)) tell(self, shard, record_due{proto::reason_message, {}});
}

void answer_drains(self_ptr self, session_id s);

/// Ends `shard`'s lease in the directory at once; its revocation joins `out`, which the caller
/// gives the log (lease_log::revoke) before the holder hears REVOKED, so that whatever the holder
/// sends after it is refused at commit. (Calls in flight to the holder hear of the end here
/// already; the wake record once the log has made the revocation, tell_revoked().) `holder` is
/// the holder's worker entry (already out of `workers` when it is being dropped), or null.
/// `answer_to` hears OK (request `req`) once the revocation is through the log, or ERR IO if the
/// log failed (the shard then stays busy). `holders_fault` as for end_of().
void revoke(self_ptr self, uint32_t shard, const worker* holder, std::vector<revocation>& out,
            session_actor answer_to = {}, uint64_t req = 0, bool holders_fault = true) {
  auto& st = self->state;
  auto& slot = st.slots[shard];
  session_id holder_id = slot.holder;
  uint64_t token = st.next_token++;
  if (holder_id != 0)
    if (auto end = end_of(self, shard, holder, holder_id, slot.epoch, holders_fault))
      st.ended.emplace(token, std::move(*end));
  slot.draining = false;
  if (answer_to) st.revoke_answers[token] = revoke_answer{std::move(answer_to), req};
  st.revocations_in_log++;
  slot.busy = true;
  out.push_back(revocation{token, shard_id{shard}, slot.epoch, holder_id});
  slot.holder = 0;
  refresh_free(st, shard);
  slot.holder_actor = session_actor{};
  slot.serve_calls = false;
  if (auto w = st.workers.find(holder_id); w != st.workers.end()) w->second.held.erase(shard);
  // Calls in flight to the lost holder may have run: say so.
  bool answered = false;
  for (auto i = st.inflight.begin(); i != st.inflight.end();) {
    if (i->second.holder == holder_id && i->second.shard == shard) {
      answer_error(self, i->second.client, i->second.request_id, proto::call_status::holder_lost,
                   "the holder of shard " + std::to_string(shard) +
                       " was lost while the call was in flight; it may have run");
      i = st.inflight.erase(i);
      answered = true;
    } else {
      ++i;
    }
  }
  if (answered) answer_drains(self, holder_id);  // a DRAIN may have waited for those calls
}

/// Revokes `shard` from its current holder (looked up in `workers`), given to the log at once.
void revoke_held(self_ptr self, uint32_t shard, session_actor answer_to = {}, uint64_t req = 0) {
  auto& st = self->state;
  auto w = st.workers.find(st.slots[shard].holder);
  std::vector<revocation> out;
  revoke(self, shard, w == st.workers.end() ? nullptr : &w->second, out, std::move(answer_to), req);
  st.log->revoke(std::move(out));
}

/// Ends every lease in `shards` (held by `holder`, see revoke()) and gives the log their
/// revocations in one call. `shards` is a copy: revoke() takes each out of the holder's set.
void revoke_all(self_ptr self, std::set<uint32_t> shards, const worker* holder) {
  std::vector<revocation> out;
  out.reserve(shards.size());
  for (auto shard : shards)
    revoke(self, shard, holder, out);
  if (!out.empty()) self->state.log->revoke(std::move(out));
}

/// Forgets worker `s` and ends its leases.
void drop_worker(self_ptr self, session_id s) {
  auto& st = self->state;
  auto it = st.workers.find(s);
  if (it == st.workers.end()) return;
  auto gone = std::move(it->second);
  st.workers.erase(it);
  st.long_lived.erase({gone.order, s});
  revoke_all(self, std::move(gone.held), &gone);
}

/// The leases `w` holds, as a REVOKED frame's list.
std::vector<proto::shard_epoch> held_leases(const directory_state& st, const worker& w) {
  std::vector<proto::shard_epoch> out;
  for (auto shard : w.held)
    out.push_back(proto::shard_epoch{shard_id{shard}, st.slots[shard].epoch});
  return out;
}

/// Answers the DRAINs of session `s` once every call routed to it before them is answered,
/// whichever shards those calls were for (PROTOCOL.md §3).
void answer_drains(self_ptr self, session_id s) {
  auto& st = self->state;
  auto w = st.workers.find(s);
  if (w == st.workers.end()) return;
  auto& drains = w->second.drains;
  for (auto i = drains.begin(); i != drains.end();) {
    bool busy = false;
    for (auto& [relay, c] : st.inflight)
      if (c.holder == s && relay < i->second) busy = true;
    if (busy) {
      ++i;
      continue;
    }
    send_frame(self, w->second.actor, proto::ok{i->first, {}});
    i = drains.erase(i);
  }
}

proto::lease lease_frame(const directory_state& st, const worker& w,
                         std::vector<proto::grant_entry> grants) {
  return proto::lease{w.hello_id,        st.cfg.shards,  st.cfg.ping_interval_ms,
                      st.cfg.timeout_ms, w.remaining_ms, std::move(grants)};
}

/// Test hook (FUSEE_TEST_LEASE_DELAY_MS=N): every LEASE leaves N ms late, as from a server slow to
/// grant a million shards; later frames may overtake it. The server logs an error at start when it
/// is set. Compiled in only with -DFUSEE_TEST_HOOKS=ON (the default for development builds).
std::chrono::milliseconds lease_delay() {
#ifdef FUSEE_TEST_HOOKS
  static const auto delay = [] {
    const char* v = std::getenv("FUSEE_TEST_LEASE_DELAY_MS");
    return std::chrono::milliseconds{v ? std::strtoul(v, nullptr, 10) : 0};
  }();
  return delay;
#else
  return std::chrono::milliseconds{0};
#endif
}

/// Answers worker `w`'s HELLO: its LEASE with `grants`.
void send_lease(self_ptr self, const worker& w, std::vector<proto::grant_entry> grants) {
  auto lease = lease_frame(self->state, w, std::move(grants));
  if (auto delay = lease_delay(); delay.count() > 0)
    self->delayed_send(w.actor, delay, frame_atom::value, proto::encode(lease));
  else
    send_frame(self, w.actor, lease);
}

/// Offers worker `s` its shards: every free one up to max_shards, or exactly its invocation's
/// free ones. LEASE goes out once the grants are through the log.
void start_worker(self_ptr self, session_id s, std::vector<uint32_t> only) {
  auto& st = self->state;
  auto& w = st.workers[s];
  auto offer = [&](uint32_t shard) {
    auto& slot = st.slots[shard];
    if (slot.holder == 0 && !slot.busy && !slot.withheld) grant(st, s, w, shard);
  };
  if (w.invocation == 0) {  // every free shard, up to max_shards
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
    send_lease(self, w, {});
  }
}

/// Binds an invoked worker through the invoker; starts it if its connection is still there.
void bind_invoked(self_ptr self, session_id s, uint64_t invocation) {
  auto& st = self->state;
  auto& w = st.workers[s];
  auto name = proto::format_invocation_id(proto::invocation_id{invocation});
  auto refuse = [self, session = w.actor, req = w.hello_id](proto::err_code code, std::string why) {
    self->send(session, close_atom::value,
               proto::encode(proto::make_err(req, proto::error{code, std::move(why)})));
  };
  if (!st.scheduler) {
    refuse(proto::err_code::unknown_invocation,
           "invocation " + name + " is unknown: this server has no endpoints");
    return;
  }
  self->request(st.scheduler, std::chrono::seconds(5), bind_request{invocation, s})
      .then(
          [=](bind_result& r) {
            auto& st = self->state;
            auto w = st.workers.find(s);
            if (w == st.workers.end()) return;  // the connection ended meanwhile (BYE): no lease
            if (r.code == bind_code::unknown) {
              refuse(proto::err_code::unknown_invocation,
                     "invocation " + name + " is unknown or already over");
            } else if (r.code == bind_code::taken) {
              refuse(proto::err_code::invocation_taken,
                     "another connection already answers invocation " + name);
            } else {
              w->second.remaining_ms = r.remaining_ms;
              w->second.endpoint_index = r.endpoint_index;
              w->second.endpoint = std::move(r.endpoint);
              start_worker(self, s, std::move(r.shards));
            }
          },
          [=](caf::error&) {
            if (self->state.workers.count(s))
              refuse(proto::err_code::unknown_invocation,
                     "invocation " + name + " could not be bound in time");
          });
}

/// Why `shard` may not park one more call or message (limits.max_parked_per_shard and
/// limits.max_parked, calls and messages together), or nothing.
std::optional<std::string> parking_refused(const directory_state& st, uint32_t shard) {
  auto size_of = [shard](const auto& parked) {
    auto i = parked.find(shard);
    return i == parked.end() ? size_t{0} : i->second.size();
  };
  size_t here = size_of(st.parked_calls) + size_of(st.parked_messages);
  if (here >= st.cfg.max_parked_per_shard)
    return "shard " + std::to_string(shard) + " already has " + std::to_string(here) +
           " calls and messages waiting for a holder (limits.max_parked_per_shard)";
  if (st.parked_total >= st.cfg.max_parked)
    return "this node already has " + std::to_string(st.parked_total) +
           " calls and messages waiting for holders (limits.max_parked)";
  return std::nullopt;
}

/// The part of what is withheld that withholds `shard` for a conflict of maps, or null.
const withheld* conflict_of(const directory_state& st, uint32_t shard) {
  if (!st.slots[shard].withheld) return nullptr;
  auto* part = withholding(st.withheld, shard);
  return part && part->conflict ? part : nullptr;
}

/// A message for `m.target`, a shard of this node: to its holder, or parked until it has one
/// (the shard becomes due, reason `message`). Over the parking limits, or for a shard withheld for
/// a conflict of maps, it is dropped: its sender resends it until it is acknowledged.
void deliver(self_ptr self, remote_message&& m) {
  auto& st = self->state;
  auto& t = st.slots[m.target];
  if (takes_calls(t)) {
    send_frame(self, t.holder_actor, message_frame(std::move(m)));
    return;
  }
  auto target = m.target;
  if (parking_refused(st, target) || conflict_of(st, target)) {  // the sender resends it
    st.parked_refused++;
    return;
  }
  st.parked_messages[target].push_back(std::move(m));
  st.parked_total++;
  // (A shard being granted or revoked is not due: the log's answer tells its record.)
  if (t.holder == 0 && !t.busy) tell(self, target, record_due{proto::reason_message, {}});
}

/// ACK to the sender's lease, if the lease that sent the message still holds the shard.
void ack_sender(self_ptr self, const remote_ack& a) {
  auto& f = self->state.slots[a.sender];
  if (f.holder != 0 && f.epoch == epoch_t{a.sender_epoch})
    send_frame(self, f.holder_actor,
               proto::ack{0, shard_id{a.sender}, epoch_t{a.sender_epoch}, a.outbox_id});
}

template <class Map>
uint64_t parked_count(const Map& parked) {
  uint64_t n = 0;
  for (auto& [shard, q] : parked)
    n += q.size();
  return n;
}

/// Withholds what `w` names (cluster: withheld.hpp) and gives back what it no longer names: a
/// withheld shard is offered to nobody, its lease ends (the log first, then REVOKED with the
/// reason; a lease not yet announced leaves the worker's coming LEASE; the wake record hears of
/// an end that is no failure of the worker's), and the scheduler invokes nobody for it. For a
/// conflict of maps, which may last, calls parked for it fail and messages parked for it are
/// dropped (their senders resend). A shard given back is offered like any free one.
void withhold(self_ptr self, withheld_shards w) {
  auto& st = self->state;
  auto next = withheld_bits(w, st.slots.size());
  std::vector<revocation> out;
  std::map<std::pair<session_id, const withheld*>, std::vector<proto::shard_epoch>> told;
  st.withheld_count = 0;
  for (uint32_t s = 0; s < st.slots.size(); ++s) {
    auto& slot = st.slots[s];
    bool withheld = next[s] && slot.owned;  // another node's shard is never this node's to hold
    st.withheld_count += withheld;
    if (slot.withheld == withheld) continue;
    slot.withheld = withheld;
    refresh_free(st, s);
    if (!slot.withheld || slot.holder == 0) continue;
    auto h = st.workers.find(slot.holder);
    worker* holder = h == st.workers.end() ? nullptr : &h->second;
    if (holder && holder->answered)
      told[{slot.holder, withholding(w, s)}].push_back(proto::shard_epoch{shard_id{s}, slot.epoch});
    else if (holder)
      std::erase_if(holder->initial, [s](auto& e) { return e.shard.value() == s; });
    revoke(self, s, holder, out, {}, 0, false);  // not the worker's fault: no backoff
  }
  if (!out.empty()) st.log->revoke(std::move(out));  // the log hears first
  for (auto& [to, leases] : told)
    send_frame(self, st.workers[to.first].actor,
               proto::revoked{0, std::move(leases), to.second ? to.second->why : "withheld"});
  if (w != st.withheld && !w.parts.empty())
    spdlog::info("shards withheld count={} first_reason={}", st.withheld_count,
                 logging::quoted(w.parts.front().why));
  else if (w != st.withheld)  // (at start too: the start's hold, until every node was heard)
    spdlog::info("no shard withheld any more last_reason={}",
                 logging::quoted(st.withheld.parts.front().why));
  st.withheld = std::move(w);
  for (auto i = st.parked_calls.begin(); i != st.parked_calls.end();) {
    auto* part = conflict_of(st, i->first);
    if (!part) {
      ++i;
      continue;
    }
    for (auto& c : i->second)
      answer_error(self, c.client, c.request_id, proto::call_status::parked_too_long,
                   "shard " + std::to_string(i->first) + " is withheld: " + part->why +
                       "; the call did not run");
    st.parked_total -= i->second.size();
    st.parked_refused += i->second.size();
    tell_undue(self, i->first, proto::reason_call);
    i = st.parked_calls.erase(i);
  }
  for (auto i = st.parked_messages.begin(); i != st.parked_messages.end();) {
    if (!conflict_of(st, i->first)) {
      ++i;
      continue;
    }
    st.parked_total -= i->second.size();
    st.parked_refused += i->second.size();
    tell_undue(self, i->first, proto::reason_message);
    i = st.parked_messages.erase(i);
  }
  if (st.scheduler) self->send(st.scheduler, st.withheld);
  offer_free(st);
}

/// The directory's stats (docs/operations.md, "directory").
actor_stats stats_of(self_ptr self) {
  auto& st = self->state;
  actor_stats a{"directory", 0};
  uint64_t held = 0, workers = 0, invoked = 0;
  for (auto& slot : st.slots)
    held += slot.holder != 0;
  for (auto& [id, w] : st.workers)
    (w.invocation != 0 ? invoked : workers)++;
  a.state = st.scheduler ? "invoker" : "no-invoker";
  a.mailbox = self->mailbox().size();
  a.num("shards", st.slots.size());
  if (st.wake) {
    a.num("recordActors", st.wake->actors());
    a.num("recordsRetired", st.records_retired);
  }
  a.num("heldShards", held);
  a.num("workers", workers);
  a.num("invokedWorkers", invoked);
  a.num("parkedCalls", parked_count(st.parked_calls));
  a.num("parkedMessages", parked_count(st.parked_messages));
  a.num("callsInFlight", st.inflight.size());
  a.num("revocationsInLog", st.revocations_in_log);
  a.num("leasesGranted", st.leases_granted);
  a.num("leasesRevoked", st.leases_revoked);
  a.num("shardsBlocked", st.shards_blocked);
  a.num("calls", st.calls);
  a.num("callsParked", st.calls_parked);
  a.num("callsExpired", st.calls_expired);
  a.num("relays", st.relays);
  a.num("parkedRefused", st.parked_refused);
  if (st.owners.clustered()) {
    a.num("ownedShards", st.owners.own_shard_count());
    a.num("withheldShards", st.withheld_count);
    a.num("forwardedCalls", st.forwarded_calls);
    a.num("forwardedMessages", st.forwarded_messages);
    a.num("messagesFromNodes", st.messages_in);
  }
  return a;
}

directory_actor::behavior_type directory_fn(self_ptr self, node_settings cfg, lease_log* log) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.log = log;
  st.owners = shard_owners(st.cfg);
  st.slots.resize(st.cfg.shards);
  st.free_bits.assign((st.cfg.shards + 63) / 64, 0);
  // In a cluster nothing is leased until the node has heard every peer (the cluster actor says):
  // the hold is every shard this node serves.
  st.withheld = starting_hold(st.owners);
  bool hold = !st.withheld.parts.empty();
  for (uint32_t s = 0; s < st.cfg.shards; ++s) {
    st.slots[s].owned = st.owners.mine(s);
    st.slots[s].withheld = hold && st.slots[s].owned;
    st.withheld_count += st.slots[s].withheld;
    st.slots[s].epoch = log->recovered_epoch(shard_id{s});
    refresh_free(st, s);
  }
  return {
      [=](endpoint_trouble& t) {
        if (t.text.empty())
          self->state.endpoint_trouble.erase(t.endpoint);
        else
          self->state.endpoint_trouble[t.endpoint] = std::move(t.text);
      },
      [=](fence_request& f) {
        // An invocation ended: the leases it holds are revoked (grants still in the log are
        // revoked when they arrive); the connection stays.
        auto& st = self->state;
        auto w = st.workers.find(f.session);
        if (w == st.workers.end()) return;
        auto& wk = w->second;
        wk.fenced = true;
        wk.overran = f.overran;
        if (wk.held.empty()) return;
        proto::revoked r{0, held_leases(st, wk), "the invocation ended"};
        // The log hears of the revocation before the worker does, so anything the worker sends
        // after REVOKED is queued behind it and refused (STALE_EPOCH).
        revoke_all(self, wk.held, &wk);
        if (wk.answered)
          send_frame(self, wk.actor, r);
        else
          wk.initial.clear();  // never announced: its LEASE (when its grants are in) is empty
        offer_free(st);
      },
      [=](hello_request& h) {
        auto& st = self->state;
        auto s = h.from.session;
        auto& w = st.workers[s];
        w.actor = h.from.reply_to;
        w.order = st.next_order++;
        w.max_shards = h.max_shards;
        w.serve_calls = h.serve_calls;
        w.hello_id = h.from.request;
        w.invocation = h.invocation;
        if (h.invocation == 0) {
          st.long_lived.emplace(w.order, s);
          start_worker(self, s, {});
        } else {
          bind_invoked(self, s, h.invocation);
        }
      },
      [=](drain_request& d) {
        auto& st = self->state;
        auto s = d.from.session;
        for (auto shard : d.shards)
          if (shard < st.slots.size() && st.slots[shard].holder == s)
            st.slots[shard].draining = true;
        auto w = st.workers.find(s);
        if (w == st.workers.end()) {
          send_frame(self, d.from.reply_to, proto::ok{d.from.request, {}});
          return;
        }
        w->second.drains.emplace_back(d.from.request, st.next_relay);
        answer_drains(self, s);
      },
      [=](idle_request& idle) {
        auto& st = self->state;
        auto s = idle.from.session;
        // (a time after the record's now is the record's to clamp: shard.cpp, on_lease_end)
        auto reported = idle.read_at != 0 ? idle.read_at : clock_ns(self->clock().now());
        for (auto& r : idle.reports)
          if (r.shard < st.slots.size() && st.slots[r.shard].holder == s &&
              st.slots[r.shard].epoch == epoch_t{r.epoch}) {
            r.end.reported_at = reported;  // its timer counts from the report, not its record
            st.reports[r.shard] = idle_report{s, epoch_t{r.epoch}, std::move(r.end)};
          }
        send_frame(self, idle.from.reply_to, proto::ok{idle.from.request, {}});
      },
      [=](call_request& c) {
        auto& st = self->state;
        auto shard = c.from.shard;
        st.calls++;
        if (shard >= st.slots.size()) {
          answer_error(self, c.from.reply_to, c.from.request, proto::call_status::bad_request,
                       "no shard " + std::to_string(shard) + " (there are " +
                           std::to_string(st.slots.size()) + ")");
          return;
        }
        if (!st.slots[shard].owned) {  // another node's: it answers, through the forwarder
          st.forwarded_calls++;
          self->send(st.forwarder, std::move(c));
          return;
        }
        if (auto* w = conflict_of(st, shard)) {  // it may last: no parking
          answer_error(self, c.from.reply_to, c.from.request, proto::call_status::parked_too_long,
                       "shard " + std::to_string(shard) + " is withheld: " + w->why +
                           "; the call did not run");
          return;
        }
        parked_call p{c.from.reply_to,   c.from.request,    std::move(c.method),
                      std::move(c.type), std::move(c.args), st.next_call_seq++};
        auto& slot = st.slots[shard];
        if (takes_calls(slot)) {
          dispatch_call(self, shard, std::move(p));
          return;
        }
        if (no_holder_can_come(st, shard)) {
          answer_log_failed(self, shard, p);
          return;
        }
        // Due (if busy, the log's answer tells its record), even when parking is refused below:
        // a worker woken for the call lets the client's retry find a holder.
        if (slot.holder == 0 && !slot.busy)
          tell(self, shard, record_due{proto::reason_call, p.type});
        if (auto why = parking_refused(st, shard)) {
          st.parked_refused++;
          answer_error(self, p.client, p.request_id, proto::call_status::parked_too_long,
                       *why + "; the call did not run: try again later");
          return;
        }
        uint32_t wait = st.cfg.park_for(c.park_ms);
        self->delayed_send(self, std::chrono::milliseconds(wait), call_expired{shard, p.seq});
        st.parked_calls[shard].push_back(std::move(p));
        st.parked_total++;
        st.calls_parked++;
      },
      [=](call_expired& e) {
        auto& parked = self->state.parked_calls;
        auto found = parked.find(e.shard);
        if (found == parked.end()) return;
        auto& q = found->second;
        for (auto i = q.begin(); i != q.end(); ++i)
          if (i->seq == e.seq) {
            std::string why;  // the invoker's trouble, if any: two endpoints' at most
            size_t told = 0;
            for (auto& [index, text] : self->state.endpoint_trouble) {
              if (told++ == 2) {
                why += "; ...";
                break;
              }
              why += (why.empty() ? " (the invoker's " : "; ") + text;
            }
            if (!why.empty()) why += ")";
            if (self->state.overran.count(e.shard))
              why = " (its last invocation did not answer within budget + grace: the shard backs "
                    "off, a step may take longer than the budget)" +
                    why;
            answer_error(self, i->client, i->request_id, proto::call_status::parked_too_long,
                         "no holder took shard " + std::to_string(e.shard) +
                             " while the call was parked" + why);
            q.erase(i);
            self->state.parked_total--;
            self->state.calls_expired++;
            if (q.empty()) {
              parked.erase(found);
              tell_undue(self, e.shard, proto::reason_call);
            }
            return;
          }
      },
      [=](call_reply_request& r) {
        auto& st = self->state;
        if (!admit(self, r.from)) return;
        auto i = st.inflight.find(r.relay);
        if (i == st.inflight.end() || i->second.holder != r.from.session)
          return;  // unknown or already answered: ignored
        answer_call(self, i->second.client, i->second.request_id,
                    r.ok ? proto::call_status::ok : proto::call_status::failed, std::move(r.body));
        st.inflight.erase(i);
        answer_drains(self, r.from.session);
      },
      [=](relay_request& r) {
        self->state.relays++;
        auto& st = self->state;
        if (!admit(self, r.from)) return;
        if (r.target >= st.slots.size()) {
          send_frame(self, r.from.reply_to,
                     proto::make_err(r.from.request,
                                     proto::error{proto::err_code::bad_body,
                                                  "RELAY target shard " + std::to_string(r.target) +
                                                      " does not exist"}));
          return;
        }
        remote_message m{r.target, r.from.shard, r.from.epoch, r.outbox_id, std::move(r.payload)};
        if (!st.slots[r.target].owned) {
          st.forwarded_messages++;
          self->send(st.forwarder, std::move(m));
          return;
        }
        deliver(self, std::move(m));
      },
      [=](remote_message& m) {
        self->state.messages_in++;
        if (m.target < self->state.slots.size() && self->state.slots[m.target].owned)
          deliver(self, std::move(m));
      },
      [=](remote_ack& a) {
        if (a.sender < self->state.slots.size() && self->state.slots[a.sender].owned)
          ack_sender(self, a);
      },
      [=](cluster_ready& c) { self->state.forwarder = std::move(c.forwarder); },
      [=](withheld_shards& w) { withhold(self, std::move(w)); },
      [=](ack_request& a) {
        auto& st = self->state;
        if (!admit(self, a.from)) return;
        if (a.sender >= st.slots.size()) return;
        remote_ack ack{a.sender, a.sender_epoch, a.outbox_id};
        if (!st.slots[a.sender].owned)
          self->send(st.forwarder, ack);
        else
          ack_sender(self, ack);
      },
      [=](release_request& r) {
        auto& st = self->state;
        if (!admit(self, r.from)) return;
        st.workers[r.from.session].released.insert(r.from.shard);
        revoke_held(self, r.from.shard, r.from.reply_to, r.from.request);
      },
      [=](session_ended& e) {
        auto& st = self->state;
        auto it = st.workers.find(e.session);
        if (it == st.workers.end()) return;
        auto actor = it->second.actor;
        std::optional<proto::revoked> told;
        if (e.silent)  // liveness: REVOKED (once the log has the revocations), then it closes
          told = proto::revoked{0, held_leases(st, it->second),
                                "no frame for " + std::to_string(st.cfg.timeout_ms) +
                                    " ms: liveness timeout"};
        drop_worker(self, e.session);
        if (told) self->send(actor, close_atom::value, proto::encode(*told));
        offer_free(st);
      },
      [=](grants_made& made) {
        auto& st = self->state;
        std::vector<revocation> unannounced;  // leases that end as they arrive
        std::map<session_id, std::vector<proto::grant_entry>> pushes;
        std::set<session_id> waiting;   // workers whose LEASE may be complete now
        std::vector<uint32_t> serving;  // shards whose holder may get calls and messages now
        size_t failed = 0;
        for (auto& g : made.grants) {
          auto& slot = st.slots[g.shard];
          slot.granting = false;
          auto w = st.workers.find(g.session);
          if (w != st.workers.end()) {
            w->second.pending--;
            if (!w->second.answered) waiting.insert(g.session);
          }
          if (g.epoch == 0) {  // the log failed (until restart): the shard stays busy
            failed++;
            answer_parked_log_failed(self, g.shard);
            // (its record may have heard `leased` at the invoker's start: no lease came of it)
            if (st.wake) {
              lease_end end;
              end.crashed = true;
              end.holders_fault = false;
              tell(self, g.shard, std::move(end));
            }
            continue;
          }
          slot.busy = false;
          slot.epoch = epoch_t{g.epoch};
          slot.holder = g.session;
          st.leases_granted++;
          spdlog::debug("lease granted shard={} epoch={} session={}", g.shard, g.epoch, g.session);
          refresh_free(st, g.shard);
          if (w == st.workers.end() || w->second.fenced || slot.withheld) {
            // The worker left, or its invocation ended, or the shard is withheld, meanwhile: the
            // new lease ends at once, unannounced (for a fenced worker, as its other leases did:
            // an invoked lease ended without a report).
            bool fault = !slot.withheld || w == st.workers.end() || w->second.fenced;
            revoke(self, g.shard, w == st.workers.end() ? nullptr : &w->second, unannounced, {}, 0,
                   fault);
            continue;
          }
          auto& wk = w->second;
          wk.held.insert(g.shard);
          slot.holder_actor = wk.actor;
          proto::grant_entry e{shard_id{g.shard}, epoch_t{g.epoch}, proto::lsn_t{g.durable_lsn}};
          if (!wk.answered) {
            // No call or message before the LEASE that names the shard: its grants may come
            // from several log batches.
            slot.serve_calls = false;
            wk.initial.push_back(e);
          } else {
            slot.serve_calls = wk.serve_calls;
            pushes[g.session].push_back(e);
            serving.push_back(g.shard);
          }
        }
        if (failed > 0) add_blocked(st, failed);
        if (!unannounced.empty()) st.log->revoke(std::move(unannounced));
        std::vector<session_id> leased;
        for (auto s : waiting)
          if (st.workers[s].pending == 0) leased.push_back(s);
        for (auto s : leased) {
          auto& wk = st.workers[s];
          wk.answered = true;
          for (auto& e : wk.initial) {
            st.slots[e.shard.value()].serve_calls = wk.serve_calls;
            serving.push_back(e.shard.value());
          }
          if (wk.endpoint)
            self->send(wk.endpoint,
                       invocation_leased{wk.invocation, static_cast<uint32_t>(wk.initial.size())});
          send_lease(self, wk, std::move(wk.initial));
          wk.initial.clear();
        }
        for (auto& g : made.grants)  // a leased shard is never due
          if (g.epoch != 0 && st.slots[g.shard].holder == g.session)
            tell(self, g.shard, record_leased{st.workers[g.session].endpoint_index});
        for (auto& [s, grants] : pushes)
          send_frame(self, st.workers[s].actor, proto::grant{0, std::move(grants)});
        for (auto shard : serving)
          flush_parked(self, shard);
        offer_free(st);
      },
      [=](revocations_done& done) {
        auto& st = self->state;
        bool failed = !done.failure.empty();
        for (auto& r : done.revoked) {
          if (auto i = st.revoke_answers.find(r.token); i != st.revoke_answers.end()) {
            if (failed)  // records queued before it may not have been written
              send_frame(self, i->second.to,
                         proto::make_err(i->second.request_id,
                                         proto::error{proto::err_code::io,
                                                      "the log failed (" + done.failure +
                                                          "): the lease of shard " +
                                                          std::to_string(r.shard) +
                                                          " ended, records queued before the "
                                                          "RELEASE may not be durable, and the "
                                                          "shard gets no holder until restart"}));
            else
              send_frame(self, i->second.to, proto::ok{i->second.request_id, {}});
            st.revoke_answers.erase(i);
          }
          st.revocations_in_log--;
          std::optional<lease_end> end;
          if (auto e = st.ended.find(r.token); e != st.ended.end()) {
            end = std::move(e->second);
            end->wrote = r.wrote;
            st.ended.erase(e);
            if (end->overran)
              st.overran.insert(r.shard);
            else
              st.overran.erase(r.shard);
          }
          if (failed) {  // the lease ended here, but the shard stays busy
            answer_parked_log_failed(self, r.shard);      // (once the directory heard of it)
            tell_revoked(self, r.shard, std::move(end));  // due, but the invoker is halted
            continue;
          }
          st.slots[r.shard].busy = false;
          st.leases_revoked++;
          spdlog::debug("lease ended shard={}", r.shard);
          refresh_free(st, r.shard);
          tell_revoked(self, r.shard, std::move(end));
        }
        if (failed) add_blocked(st, done.revoked.size());
        // A million leases' ends leave a million buckets behind: give them back once all are told.
        if (st.ended.empty() && st.ended.bucket_count() > 4096) decltype(st.ended){}.swap(st.ended);
        offer_free(st);
      },
      [=](log_failed& f) { halt_invoker(self, std::move(f.failure)); },
      [=](invoker_ready& inv) {
        // The invoker is up: every shard nobody holds is due once (`recovery`).
        auto& st = self->state;
        st.scheduler = std::move(inv.scheduler);
        st.wake = std::move(inv.records);
        if (st.log_failure)  // first: nothing may be dispatched
          self->send(st.scheduler, halt_atom::value, halt_reason(st));
        if (!st.withheld.parts.empty()) self->send(st.scheduler, st.withheld);  // also first
        // Records start due; those of shards held already, or whose grant is in the log, hear so
        // (and then report idle), and the scheduler, which could dispatch before their reports,
        // with its start. (A grant that then ends at once, its worker gone, ends the lease the
        // record heard of: the record is due again and says so.) A worker being granted is
        // long-lived (an invoked one binds through the scheduler, which the directory had not).
        std::vector<uint32_t> held;
        for (uint32_t shard = 0; shard < st.slots.size() && shard < st.wake->size(); ++shard)
          if (st.slots[shard].holder != 0 || st.slots[shard].granting) held.push_back(shard);
        self->send(st.scheduler, caf::put_atom::value, held);  // dispatching may start
        for (auto shard : held) {
          auto w = st.workers.find(st.slots[shard].holder);
          tell(self, shard,
               record_leased{w == st.workers.end() ? int32_t{-1} : w->second.endpoint_index});
        }
        st.period_started = self->clock().now();
        if (st.cfg.retire_idle_ms > 0)
          self->delayed_send(self, std::chrono::seconds(1), retire_atom::value);
      },
      [=](retire_atom) {
        bool more = retire_quiet(self);
        // The next slice soon, or a look once a second. (Short: a pending timer holds the actor
        // past its exit.)
        self->delayed_send(self, more ? retire_slice_gap : std::chrono::milliseconds(1000),
                           retire_atom::value);
      },
      [=](parked_atom) -> uint64_t { return parked_count(self->state.parked_calls); },
      [=](stats_atom) { return stats_of(self); },
      [=](view_atom, uint32_t from, uint32_t to) {
        auto& st = self->state;
        std::string out;
        if (!clamp_range(st.slots.size(), from, to)) return out;
        out.resize(to - from + 1);
        for (uint32_t s = from; s <= to; ++s)
          out[s - from] = static_cast<char>(lease_mark_of(view_of(st, s)));
        for (auto& [shard, q] : st.parked_calls)
          if (shard >= from && shard <= to) out[shard - from] |= lease_mark::parked;
        for (auto& [shard, q] : st.parked_messages)
          if (shard >= from && shard <= to) out[shard - from] |= lease_mark::parked;
        return out;
      },
      [=](const shard_details_request& req) {
        auto& st = self->state;
        lease_details out;
        for (auto s : req.shards) {
          shard_lease_view v;
          if (s < st.slots.size()) {
            v = view_of(st, s);
            if (auto i = st.parked_calls.find(s); i != st.parked_calls.end())
              v.parked_calls = static_cast<uint32_t>(i->second.size());
            if (auto i = st.parked_messages.find(s); i != st.parked_messages.end())
              v.parked_messages = static_cast<uint32_t>(i->second.size());
          }
          out.shards.push_back(v);
        }
        for (auto sid : req.sessions) {
          auto w = st.workers.find(sid);
          out.held.push_back(w == st.workers.end() ? 0 : w->second.held.size());
        }
        return out;
      },
  };
}

}  // namespace

directory_actor spawn_directory(caf::actor_system& sys, const node_settings& settings,
                                lease_log* log) {
  return sys.spawn(directory_fn, settings, log);
}

}  // namespace fusee::server
