#include "actors/inspect/inspector.hpp"

#include "actors/wake_records.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <deque>
#include <unordered_map>

#include "actors/inspect/query.hpp"
#include "actors/inspect/shard_state.hpp"
#include "actors/log_sink.hpp"
#include "actors/wal/wal_writer.hpp"
#include "protocol/ids.hpp"
#include "protocol/invocation_request.hpp"

namespace fusee::server {

namespace {

using clock_type = caf::actor_clock::clock_type;
using time_point = caf::actor_clock::time_point;
using ms = std::chrono::milliseconds;

/// No more than this many names in no_answer (the count says how many more).
constexpr size_t max_no_answer_names = 100;

size_t kind_rank(const std::string& kind) {
  auto& k = actor_kinds();
  return static_cast<size_t>(std::find(k.begin(), k.end(), kind) - k.begin());
}

/// One row while a query runs: compact, because a query may cover 100,000 shards; the full
/// actor_stats is built for the rows on the page only.
struct candidate {
  uint8_t kind = 0;  ///< index in actor_kinds()
  uint64_t id = 0;
  char state = 0;  ///< shard_state for shards
  bool asked = false;
  bool pending = false;  ///< asked, no answer yet
  bool answered = false;
  bool no_actor = false;  ///< a wake record without an actor: answered from its resting state
  bool picked = false;    ///< a shard asked with every actor (all of them, or in the sample)
  uint64_t mailbox = 0;
  int32_t answer = -1;  ///< index in run::answers
  stats_actor target;
};

struct run {
  inspect_query q;
  caf::typed_response_promise<inspect_reply> rp;
  time_point started{};
  int phase = 0;  ///< 1: views, 2: every actor asked, 3: the page's shards asked
  size_t waiting = 0;
  uint32_t from = 0, to = 0;  ///< the shard range, clamped (empty when from > to)
  /// The directory's and the scheduler's byte per shard of the range (lease_mark_of,
  /// invoker_mark_of); empty when not asked for or not come (a range asked for is never empty).
  std::string lease_marks, invoker_marks;
  bool marks_asked = false, invoker_marks_asked = false;
  /// The full views of the page's shards and the shards its sessions hold (phase 3), while
  /// `details_waiting` counts the answers still to come.
  std::unordered_map<uint32_t, shard_lease_view> page_leases;
  std::unordered_map<uint32_t, shard_invoker_view> page_invoker;
  std::unordered_map<uint64_t, uint64_t> held_by;
  int details_waiting = 0;
  std::vector<candidate> rows;
  std::deque<size_t> to_ask;  ///< rows to ask in this phase, at most max_asks_out at a time
  size_t asks_out = 0;        ///< stats requests sent and not answered, any phase
  /// Every shard of the range, its state (a shard_state's character): one byte per shard where a
  /// row is 48. Shards have rows only when they are asked (every one or a sample) or, ranked by
  /// mailbox, when they match; the others come from here.
  std::string states;
  uint64_t shards_matched = 0;            ///< shards of the range that pass the state filter
  std::array<uint64_t, 128> per_state{};  ///< matched shards by state character
  size_t shard_rows_from = 0, shard_rows_to = 0;  ///< rows built for shards, in shard order
  std::vector<actor_stats> answers;
  std::vector<std::string> no_answer;
  size_t no_answer_more = 0;

  /// The directory's view of shard `s` on the page (an empty one when it did not come).
  const shard_lease_view& lease_of(uint32_t s) const {
    static const shard_lease_view none;
    auto i = page_leases.find(s);
    return i == page_leases.end() ? none : i->second;
  }
  /// The scheduler's view of shard `s` on the page, null without an invoker (or its view).
  const shard_invoker_view* invoker_of(uint32_t s) const {
    auto i = page_invoker.find(s);
    return i == page_invoker.end() ? nullptr : &i->second;
  }
  shard_state state_at(uint32_t s) const {
    auto i = s - from;
    return state_of(i < lease_marks.size() ? static_cast<uint8_t>(lease_marks[i]) : uint8_t{0},
                    i < invoker_marks.size() ? static_cast<uint8_t>(invoker_marks[i]) : -1);
  }
  /// Ranked by mailbox (top = "mailbox"), every matched row is ranked, shards too; otherwise the
  /// matched shards follow the other kinds' rows in shard order, from `states`.
  bool ranked = false;
  bool expired = false;      ///< the deadline passed: nothing more is asked
  std::vector<size_t> page;  ///< rows on the page, in order (fixed when phase 3 starts)
  bool page_fixed = false;
};

/// Row `k` of query `id` waits, in `phase`, for a stats answer.
struct asker {
  uint64_t id;
  int phase;
  size_t k;
};

struct inspector_state {
  inspector_state() = default;
  inspector_targets t;
  std::vector<endpoint_actor> endpoints;
  bool endpoints_known = false;
  uint64_t next_run = 1;
  std::unordered_map<uint64_t, run> runs;
  /// A stats request out to an actor, and the queries waiting for its answer.
  struct owed {
    time_point sent;
    std::vector<asker> askers;
  };
  /// Actors asked and not answered yet, by any query: they are not asked again until they
  /// answer, so a stuck actor holds one pending request, not one per query. A query that finds
  /// a request younger than `join_window` waits for its answer (a concurrent query's); an older
  /// one counts as missed at once.
  std::unordered_map<caf::actor_addr, owed> owing;
  static inline const char* name = "inspector";
};

using inspector_ptr = inspector_actor::stateful_pointer<inspector_state>;

bool selects(const inspect_query& q, const char* kind) {
  return q.kind.empty() || q.kind == kind;
}

caf::timespan remaining(inspector_ptr self, const run& r) {
  auto end = r.started + ms{r.q.deadline_ms};
  auto now = self->clock().now();
  return end > now ? caf::timespan{end - now} : caf::timespan{0};
}

void advance(inspector_ptr self, uint64_t id);

/// One answer (or error) of the views phase arrived.
void view_done(inspector_ptr self, uint64_t id) {
  auto i = self->state.runs.find(id);
  if (i == self->state.runs.end() || i->second.phase != 1) return;
  if (--i->second.waiting == 0) advance(self, id);
}

void note_no_answer(run& r, std::string name) {
  if (r.no_answer.size() < max_no_answer_names)
    r.no_answer.push_back(std::move(name));
  else
    r.no_answer_more++;
}

/// Stats requests one query has out at once; the rest wait in run::to_ask. CAF 0.17 keeps an
/// actor's awaited replies in a flat map that each reply searches and shifts linearly: a million
/// requests out at once took minutes, and held the deadline tick (and a stop) behind their replies.
constexpr size_t max_asks_out = 1000;

/// How long an unanswered stats request may have been out for a later query to wait for its
/// answer instead of counting the actor as missed: a concurrent query's ask (two dashboards),
/// not a stuck actor's.
constexpr auto join_window = std::chrono::milliseconds{250};

void ask(inspector_ptr self, uint64_t id, run& r, size_t k);

/// Asks the queued rows while fewer than max_asks_out are out; then, if nothing is left to
/// wait for, moves the query on.
void ask_next(inspector_ptr self, uint64_t id, run& r) {
  while (!r.to_ask.empty() && r.asks_out < max_asks_out && !r.expired) {
    auto k = r.to_ask.front();
    r.to_ask.pop_front();
    ask(self, id, r, k);
  }
}

/// One stats request of query `id` came back (an answer, or an error when `a` is null).
void asked_back(inspector_ptr self, uint64_t id, int phase, size_t k, actor_stats* a) {
  auto i = self->state.runs.find(id);
  if (i == self->state.runs.end()) return;
  auto& r = i->second;
  r.asks_out--;
  if (r.phase != phase || !r.rows[k].pending) {
    ask_next(self, id, r);
    return;
  }
  auto& c = r.rows[k];
  c.pending = false;
  if (a) {
    c.answered = true;
    c.mailbox = a->mailbox;
    c.answer = static_cast<int32_t>(r.answers.size());
    r.answers.push_back(std::move(*a));
  }
  r.waiting--;
  ask_next(self, id, r);
  if (r.waiting == 0 && r.to_ask.empty()) advance(self, id);
}

/// Hands an actor's answer (null: an error) to every query waiting for it.
void answered_all(inspector_ptr self, const caf::actor_addr& addr, actor_stats* a) {
  auto i = self->state.owing.find(addr);
  if (i == self->state.owing.end()) return;
  auto askers = std::move(i->second.askers);
  self->state.owing.erase(i);
  for (size_t n = 0; n < askers.size(); ++n) {
    auto& w = askers[n];
    if (!a || n + 1 == askers.size()) {
      asked_back(self, w.id, w.phase, w.k, a);
    } else {
      auto copy = *a;
      asked_back(self, w.id, w.phase, w.k, &copy);
    }
  }
}

/// Asks `rows[k]` for its stats in `phase`. If it has not answered an earlier request yet, this
/// query waits for that answer when the request is younger than join_window; otherwise the
/// actor counts as not answering this query either.
void ask(inspector_ptr self, uint64_t id, run& r, size_t k) {
  auto& c = r.rows[k];
  c.asked = true;
  if (r.expired) return;
  auto addr = caf::actor_cast<caf::actor_addr>(c.target);
  auto now = self->clock().now();
  auto [i, first] = self->state.owing.try_emplace(addr);
  auto& o = i->second;
  if (first) o.sent = now;
  if (!first && now - o.sent >= join_window) return;
  if (!first && o.askers.size() >= 64) {  // queries that ended leave their entries: drop them
    auto& runs = self->state.runs;
    o.askers.erase(std::remove_if(o.askers.begin(), o.askers.end(),
                                  [&](const asker& w) { return runs.count(w.id) == 0; }),
                   o.askers.end());
  }
  o.askers.push_back({id, r.phase, k});
  c.pending = true;
  r.waiting++;
  r.asks_out++;
  if (!first) return;  // the request out answers this query too
  auto on_answer = [=](actor_stats& a) { answered_all(self, addr, &a); };
  auto on_error = [=](caf::error&) { answered_all(self, addr, nullptr); };
  // No per-request timeout (100,000 timers would cost more than the answers): the query's one
  // deadline tick ends the phase; a late answer finds the phase over and is dropped.
  self->request(c.target, caf::infinite, stats_atom::value).then(on_answer, on_error);
}

/// The shard state `q` filters by: -1 for none, 0 for a word no shard state has (none matches),
/// else its character.
int shard_filter(const inspect_query& q) {
  if (q.state.empty()) return -1;
  for (auto state : all_shard_states)
    if (q.state == state_name(state)) return static_cast<char>(state);
  return 0;
}

/// The row of shard `s`: its wake record to ask, or answered already when it has no actor.
candidate shard_row(const inspector_state& st, uint32_t s, char state) {
  candidate c;
  c.kind = static_cast<uint8_t>(kind_rank("shard"));
  c.id = s;
  c.state = state;
  if (st.t.records && s < st.t.records->size()) {
    if (auto rec = st.t.records->find(s))
      c.target = caf::actor_cast<stats_actor>(rec);
    else
      c.no_actor = c.answered = true;  // nothing to ask: it has no actor now
  } else {
    c.answered = true;  // a node without an invoker has no wake records: the views say all
  }
  return c;
}

/// The rows of every selected kind, before filters; the shards from the views alone.
void build_rows(inspector_ptr self, run& r) {
  auto& st = self->state;
  auto& q = r.q;
  if (r.from <= r.to && (selects(q, "shard") || q.grid)) {
    r.states.resize(uint64_t{r.to} - r.from + 1);
    for (uint32_t s = r.from; s <= r.to; ++s)
      r.states[s - r.from] = static_cast<char>(r.state_at(s));
  }
  auto add = [&](const char* kind, uint64_t id, stats_actor target) {
    candidate c;
    c.kind = static_cast<uint8_t>(kind_rank(kind));
    c.id = id;
    c.target = std::move(target);
    r.rows.push_back(std::move(c));
  };
  if (selects(q, "directory")) add("directory", 0, caf::actor_cast<stats_actor>(st.t.directory));
  if (selects(q, "scheduler") && st.t.scheduler)
    add("scheduler", 0, caf::actor_cast<stats_actor>(st.t.scheduler));
  if (selects(q, "log") && st.t.wal) {
    add("log", 0, {});
    auto& c = r.rows.back();
    c.answered = true;
    c.answer = static_cast<int32_t>(r.answers.size());
    r.answers.push_back(log_stats(*st.t.wal));
    c.mailbox = r.answers.back().mailbox;
  }
  if (selects(q, "gateway") && st.t.gateway) add("gateway", 0, st.t.gateway);
  if (selects(q, "cluster") && st.t.cluster)
    add("cluster", 0, caf::actor_cast<stats_actor>(st.t.cluster));
  if (selects(q, "endpoint"))
    for (uint32_t e = 0; e < st.endpoints.size(); ++e)
      add("endpoint", e, caf::actor_cast<stats_actor>(st.endpoints[e]));
  if (selects(q, "session") && st.t.sessions) {
    auto sessions = st.t.sessions->sessions();
    std::sort(sessions.begin(), sessions.end(), [](auto& a, auto& b) { return a.first < b.first; });
    for (auto& [sid, actor] : sessions)
      add("session", sid, caf::actor_cast<stats_actor>(actor));
  }
  if (selects(q, "shard") && r.from <= r.to) {
    int want = shard_filter(q);
    for (auto state : r.states)
      if (want < 0 || state == want) {
        r.shards_matched++;
        r.per_state[static_cast<unsigned char>(state)]++;
      }
    // Asked with every actor: all matched shards, or a sample of S out of n where the j-th is
    // picked when floor(j·S/n) steps up (exactly S, spread evenly over the range).
    uint64_t n = r.shards_matched, sample = q.sample, j = 0;
    bool all_picked = sample == 0 || n <= sample;
    if (r.ranked || (q.every_actor && all_picked))
      r.rows.reserve(r.rows.size() + n);
    else if (q.every_actor)
      r.rows.reserve(r.rows.size() + sample);
    r.shard_rows_from = r.rows.size();
    for (uint32_t s = r.from; s <= r.to && (q.every_actor || r.ranked); ++s) {
      char state = r.states[s - r.from];
      if (want >= 0 && state != want) continue;
      bool picked = q.every_actor && (all_picked || (j * sample) / n != ((j + 1) * sample) / n);
      j++;
      if (picked || r.ranked) {
        r.rows.push_back(shard_row(st, s, state));
        r.rows.back().picked = picked;
      }
    }
    r.shard_rows_to = r.rows.size();
  }
}

/// The rows that pass the filters, in the reply's order: kind then id, or the longest mailbox
/// first. Unless ranked, shards are left out: they follow these rows, from `run::states`. Shards
/// were filtered by state when their rows were built; the other kinds' state words come with
/// their answers.
std::vector<size_t> matched_rows(const run& r) {
  auto shard_kind = kind_rank("shard");
  std::vector<size_t> matched;
  matched.reserve(r.ranked ? r.rows.size() : r.shard_rows_from);
  for (size_t k = 0; k < r.rows.size(); ++k) {
    auto& c = r.rows[k];
    if (c.kind == shard_kind) {
      if (r.ranked) matched.push_back(k);
      continue;
    }
    if (!r.q.state.empty() && (c.answer < 0 || r.answers[c.answer].state != r.q.state)) continue;
    matched.push_back(k);
  }
  if (r.ranked)
    std::stable_sort(matched.begin(), matched.end(),
                     [&](size_t a, size_t b) { return r.rows[a].mailbox > r.rows[b].mailbox; });
  return matched;
}

/// Fixes the page: rows [offset, offset + limit) of the matched rows and, unless ranked, of the
/// matched shards after them (a row is made for a shard on the page that has none yet).
void fix_page(const inspector_state& st, run& r) {
  auto matched = matched_rows(r);
  uint64_t begin = r.q.offset, end = begin + r.q.limit;
  for (uint64_t p = begin; p < std::min<uint64_t>(end, matched.size()); ++p)
    r.page.push_back(matched[p]);
  if (!r.ranked && end > matched.size() && r.shards_matched > 0) {
    uint64_t skip = begin > matched.size() ? begin - matched.size() : 0;
    uint64_t want = end - std::max<uint64_t>(begin, matched.size());
    int filter = shard_filter(r.q);
    std::vector<std::pair<uint32_t, char>> on_page;
    for (uint32_t s = r.from; s <= r.to && on_page.size() < want; ++s) {
      char state = r.states[s - r.from];
      if (filter >= 0 && state != filter) continue;
      if (skip > 0)
        skip--;
      else
        on_page.emplace_back(s, state);
    }
    for (auto [s, state] : on_page) {  // the sample's row if it has one (built in shard order)
      auto first = r.rows.begin() + static_cast<ptrdiff_t>(r.shard_rows_from);
      auto last = r.rows.begin() + static_cast<ptrdiff_t>(r.shard_rows_to);
      auto i = std::lower_bound(first, last, s,
                                [](const candidate& c, uint32_t id) { return c.id < id; });
      if (i != last && i->id == s) {
        r.page.push_back(static_cast<size_t>(i - r.rows.begin()));
      } else {  // (past shard_rows_to: the search above never sees it)
        r.page.push_back(r.rows.size());
        r.rows.push_back(shard_row(st, s, state));
      }
    }
  }
  r.page_fixed = true;  // the answers that come now must not move rows on or off the page
}

/// The full row of candidate `c`: the actor's answer, and for shards and sessions what the
/// views add.
actor_stats materialize(inspector_ptr self, run& r, const candidate& c) {
  auto& kinds = actor_kinds();
  actor_stats a = c.answer >= 0 ? r.answers[c.answer]
                  : c.no_actor  ? self->state.t.records->resting_stats(static_cast<uint32_t>(c.id),
                                                                       self->clock().now())
                                : actor_stats{kinds[c.kind], c.id};
  a.kind = kinds[c.kind];
  a.id = c.id;
  a.answered = c.answered;
  a.mailbox = c.mailbox;
  if (a.kind == "shard") {
    auto s = static_cast<uint32_t>(c.id);
    // As of the page's views when they came (the row's other values are as recent), else as of
    // the range's states.
    auto state = static_cast<shard_state>(c.state);
    bool have_lease = r.page_leases.count(s) > 0;
    if (have_lease && (!self->state.t.scheduler || r.invoker_of(s)))
      state = state_of(r.lease_of(s), r.invoker_of(s));
    a.state = std::string(state_name(state));
    std::vector<stat_value> own = std::move(a.values);
    a.values.clear();
    auto& lease = r.lease_of(s);
    a.num("holder", lease.holder);
    a.num("epoch", lease.epoch);
    a.num("durableLsn",
          static_cast<int64_t>(self->state.t.wal ? self->state.t.wal->durable_lsn(s) : 0));
    a.num("parkedCalls", lease.parked_calls);
    a.num("parkedMessages", lease.parked_messages);
    a.num("servesCalls", lease.serve_calls);
    a.num("draining", lease.draining);
    a.num("withheld", lease.withheld);
    if (auto* inv = r.invoker_of(s)) {
      a.text("invocation", inv->invocation
                               ? proto::format_invocation_id(proto::invocation_id{inv->invocation})
                               : "");
      a.num("endpoint", inv->endpoint);
      a.text("dueFor", proto::reasons_text(inv->reasons));
    }
    for (auto& v : own)
      a.values.push_back(std::move(v));
  } else if (a.kind == "session") {
    if (auto h = r.held_by.find(c.id); h != r.held_by.end())
      a.num("shardsHeld", static_cast<int64_t>(h->second));
  }
  return a;
}

void finish(inspector_ptr self, uint64_t id) {
  auto i = self->state.runs.find(id);
  if (i == self->state.runs.end()) return;
  auto& r = i->second;
  auto& kinds = actor_kinds();
  auto& q = r.q;
  inspect_reply out;
  out.node = self->state.t.node;
  out.shards = self->state.t.shards;
  if (!r.page_fixed) fix_page(self->state, r);
  auto matched = matched_rows(r);
  auto shard_kind = kind_rank("shard");
  // Counts per state and per kind over every matched row; the shards' from `run::states`.
  std::map<std::string, uint64_t> states;
  std::vector<kind_summary> per_kind(kinds.size());
  auto tally = [&](const candidate& c) {  // what the answers say
    auto& ks = per_kind[c.kind];
    ks.asked += c.asked;
    ks.missed += c.asked && !c.answered;
    ks.mailbox_total += c.mailbox;
    ks.mailbox_max = std::max(ks.mailbox_max, c.mailbox);
    if (c.answer >= 0)
      for (auto& v : r.answers[c.answer].values) {
        if (v.is_text) continue;
        auto t = std::find_if(ks.totals.begin(), ks.totals.end(),
                              [&](const stat_value& x) { return x.key == v.key; });
        if (t == ks.totals.end())
          ks.totals.push_back(stat_value{v.key, v.number, {}, false});
        else
          t->number += v.number;
      }
  };
  for (auto k : matched) {
    auto& c = r.rows[k];
    if (c.kind == shard_kind) continue;
    states[c.answer >= 0 ? r.answers[c.answer].state : std::string("unknown")]++;
    per_kind[c.kind].actors++;
    tally(c);
  }
  for (auto& c : r.rows)  // every shard's row was asked or is on the page, and matched
    if (c.kind == shard_kind) tally(c);
  per_kind[shard_kind].actors = r.shards_matched;
  for (auto state : all_shard_states)
    if (auto n = r.per_state[static_cast<unsigned char>(state)])
      states[std::string(state_name(state))] += n;
  out.matched =
      matched.size() - (r.ranked ? r.shard_rows_to - r.shard_rows_from : 0) + r.shards_matched;
  for (auto& [s, n] : states)
    out.states.push_back(state_count{s, n});
  for (size_t k = 0; k < kinds.size(); ++k)
    if (per_kind[k].actors > 0) {
      per_kind[k].kind = kinds[k];
      out.kinds.push_back(per_kind[k]);
    }
  for (auto& c : r.rows)
    if (c.asked && !c.answered) note_no_answer(r, kinds[c.kind] + " " + std::to_string(c.id));
  for (auto k : r.page)
    out.rows.push_back(materialize(self, r, r.rows[k]));
  out.no_answer = std::move(r.no_answer);
  if (r.no_answer_more > 0)
    out.no_answer.push_back("... and " + std::to_string(r.no_answer_more) + " more");
  if (q.grid) out.grid = std::move(r.states);
  out.took_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(self->clock().now() - r.started)
          .count());
  r.rp.deliver(std::move(out));
  self->state.runs.erase(i);
}

/// One answer of the page's views arrived, or `missing` names who did not answer.
void details_done(inspector_ptr self, uint64_t id, const char* missing = nullptr) {
  auto i = self->state.runs.find(id);
  if (i == self->state.runs.end() || i->second.details_waiting == 0) return;
  auto& r = i->second;
  if (missing) note_no_answer(r, std::string(missing) + " (the page's views)");
  r.details_waiting--;
  if (--r.waiting == 0) advance(self, id);
}

/// How long the page's views may still take once the query's deadline has passed before they
/// were asked for (the page became known only then): the directory and the scheduler answer
/// them at once unless stuck, and without them the page's rows would be empty.
constexpr ms details_grace{250};

/// Asks the directory and the scheduler for the full views of the page's shards and the shards
/// its sessions hold: a few rows, where the states came a byte per shard.
void ask_details(inspector_ptr self, uint64_t id, run& r) {
  auto& st = self->state;
  auto shard_kind = kind_rank("shard"), session_kind = kind_rank("session");
  shard_details_request req;
  for (auto k : r.page) {
    auto& c = r.rows[k];
    if (c.kind == shard_kind) req.shards.push_back(static_cast<uint32_t>(c.id));
    if (c.kind == session_kind) req.sessions.push_back(c.id);
  }
  if (req.shards.empty() && req.sessions.empty()) return;
  auto wait = r.expired ? caf::timespan{details_grace} : remaining(self, r);
  if (st.t.scheduler && !req.shards.empty()) {
    r.waiting++;
    r.details_waiting++;
    self->request(st.t.scheduler, wait, req)
        .then(
            [=](std::vector<shard_invoker_view>& v) {
              auto i = self->state.runs.find(id);
              if (i == self->state.runs.end() || i->second.details_waiting == 0) return;
              for (size_t k = 0; k < v.size() && k < req.shards.size(); ++k)
                i->second.page_invoker[req.shards[k]] = v[k];
              details_done(self, id);
            },
            [=](caf::error&) { details_done(self, id, "scheduler"); });
  }
  r.waiting++;
  r.details_waiting++;
  self->request(st.t.directory, wait, req)
      .then(
          [=](lease_details& d) {
            auto i = self->state.runs.find(id);
            if (i == self->state.runs.end() || i->second.details_waiting == 0) return;
            for (size_t k = 0; k < d.shards.size() && k < req.shards.size(); ++k)
              i->second.page_leases[req.shards[k]] = d.shards[k];
            for (size_t k = 0; k < d.held.size() && k < req.sessions.size(); ++k)
              i->second.held_by[req.sessions[k]] = d.held[k];
            details_done(self, id);
          },
          [=](caf::error&) { details_done(self, id, "directory"); });
}

/// Moves a query to its next phase once the current one has every answer (or its deadline).
void advance(inspector_ptr self, uint64_t id) {
  auto i = self->state.runs.find(id);
  if (i == self->state.runs.end()) return;
  auto& r = i->second;
  if (r.phase == 1) {
    r.phase = 2;
    build_rows(self, r);
    auto shard_kind = kind_rank("shard");
    if (r.marks_asked && r.lease_marks.empty()) note_no_answer(r, "directory (the shards' states)");
    if (r.invoker_marks_asked && r.invoker_marks.empty())
      note_no_answer(r, "scheduler (the shards' states)");
    for (size_t k = 0; k < r.rows.size(); ++k) {
      auto& c = r.rows[k];
      if (!c.target || c.answered) continue;
      if (c.kind != shard_kind || c.picked) {
        c.asked = true;  // (one the deadline leaves unasked counts as missed)
        r.to_ask.push_back(k);
      }
    }
    ask_next(self, id, r);
    if (r.waiting > 0 || !r.to_ask.empty()) return;
  }
  if (r.phase == 2) {
    r.phase = 3;
    // The page's shards not asked yet: the page is known only now (the other kinds' states
    // and, for a ranking, the mailboxes came with their answers).
    fix_page(self->state, r);
    for (auto k : r.page)
      if (r.rows[k].target && !r.rows[k].asked) ask(self, id, r, k);
    ask_details(self, id, r);
    if (r.waiting > 0) return;
  }
  finish(self, id);
}

/// The query's deadline: what has not answered is listed as such, and the query ends now.
void expire(inspector_ptr self, uint64_t id) {
  auto i = self->state.runs.find(id);
  if (i == self->state.runs.end()) return;
  auto& r = i->second;
  r.expired = true;  // from now on ask() asks nobody
  for (auto& c : r.rows)
    c.pending = false;
  r.waiting = 0;
  r.to_ask.clear();
  if (r.details_waiting > 0) note_no_answer(r, "directory or scheduler (the page's views)");
  r.details_waiting = 0;
  // The remaining phases without asking an actor: rows, the page (whose views are still asked
  // for, within details_grace, if it was not known before), then finish.
  advance(self, id);
}

/// The query on every node: the cluster actor names the nodes and their inspectors (this one
/// included); each answers the query itself within its deadline. A node that is not up, or does
/// not answer in time, is reported with why.
caf::typed_response_promise<cluster_reply> inspect_cluster(inspector_ptr self, inspect_query q) {
  auto rp = self->make_response_promise<cluster_reply>();
  auto started = self->clock().now();
  auto wait = ms(std::clamp<uint32_t>(q.deadline_ms, 1, inspect_query::max_deadline_ms) + 500);
  auto me = caf::actor_cast<caf::strong_actor_ptr>(self);
  auto ask_all = [=](std::vector<cluster_member> members) mutable {
    auto acc = std::make_shared<cluster_reply>();
    auto left = std::make_shared<size_t>(members.size());
    auto done = [=]() mutable {
      if (--*left > 0) return;
      acc->took_us = static_cast<uint64_t>(
          std::chrono::duration_cast<std::chrono::microseconds>(self->clock().now() - started)
              .count());
      rp.deliver(std::move(*acc));
    };
    acc->nodes.resize(members.size());
    for (size_t i = 0; i < members.size(); ++i) {
      auto& n = acc->nodes[i];
      n.member = std::move(members[i]);
      auto target = caf::actor_cast<inspector_actor>(std::move(n.member.inspector));
      n.member.inspector = nullptr;
      if (!target) {
        n.error = n.member.state == "self" ? "this node's inspector is not running"
                                           : "node " + n.member.state + ": " + n.member.error;
        done();
        continue;
      }
      self->request(target, wait, q)
          .then(
              [=](inspect_reply& r) mutable {
                acc->nodes[i].answered = true;
                acc->nodes[i].reply = std::move(r);
                done();
              },
              [=](caf::error& e) mutable {
                acc->nodes[i].error = "no answer: " + self->system().render(e);
                done();
              });
    }
    if (members.empty()) rp.deliver(cluster_reply{});
  };
  if (!self->state.t.cluster) {  // a cluster of one
    cluster_member alone;
    alone.name = self->state.t.node;
    alone.state = "self";
    alone.inspector = me;
    ask_all({std::move(alone)});
    return rp;
  }
  self->request(self->state.t.cluster, wait, members_atom::value)
      .then([=](std::vector<cluster_member>& members) mutable { ask_all(std::move(members)); },
            [=](caf::error& e) mutable {
              rp.deliver(
                  caf::make_error(caf::sec::runtime_error,
                                  "the cluster actor did not answer: " + self->system().render(e)));
            });
  return rp;
}

inspector_actor::behavior_type inspector_fn(inspector_ptr self, inspector_targets targets) {
  self->state.t = std::move(targets);
  return {
      [=](inspect_query& q) -> caf::typed_response_promise<inspect_reply> {
        auto& st = self->state;
        q.limit = std::min(q.limit, inspect_query::max_limit);
        q.deadline_ms = std::clamp<uint32_t>(q.deadline_ms, 1, inspect_query::max_deadline_ms);
        if (q.top == "mailbox") q.every_actor = true;
        auto id = st.next_run++;
        auto& r = st.runs[id];
        r.q = q;
        r.ranked = q.top == "mailbox";
        r.rp = self->make_response_promise<inspect_reply>();
        r.started = self->clock().now();
        r.phase = 1;
        r.from = q.shard_from;
        r.to = q.shard_to;
        if (!clamp_range(st.t.shards, r.from, r.to)) {  // no shard selected
          r.from = 1;
          r.to = 0;
        }
        auto rp = r.rp;
        self->delayed_send(self, remaining(self, r), tick_atom::value, id);
        // The states of the range's shards, a byte each from the directory and the scheduler.
        bool shards = (selects(q, "shard") || q.grid) && r.from <= r.to;
        if (shards) {
          r.marks_asked = true;
          r.waiting++;
          self->request(st.t.directory, remaining(self, r), view_atom::value, r.from, r.to)
              .then(
                  [=](std::string& marks) {
                    auto i = self->state.runs.find(id);
                    if (i != self->state.runs.end() && i->second.phase == 1)
                      i->second.lease_marks = std::move(marks);
                    view_done(self, id);
                  },
                  [=](caf::error&) { view_done(self, id); });
        }
        if (shards && st.t.scheduler) {
          r.invoker_marks_asked = true;
          r.waiting++;
          self->request(st.t.scheduler, remaining(self, r), view_atom::value, r.from, r.to)
              .then(
                  [=](std::string& marks) {
                    auto i = self->state.runs.find(id);
                    if (i != self->state.runs.end() && i->second.phase == 1)
                      i->second.invoker_marks = std::move(marks);
                    view_done(self, id);
                  },
                  [=](caf::error&) { view_done(self, id); });
        }
        if (selects(q, "endpoint") && st.t.scheduler && !st.endpoints_known) {
          r.waiting++;
          self->request(st.t.scheduler, remaining(self, r), endpoints_atom::value)
              .then(
                  [=](std::vector<endpoint_actor>& e) {
                    self->state.endpoints = std::move(e);
                    self->state.endpoints_known = true;
                    view_done(self, id);
                  },
                  [=](caf::error&) { view_done(self, id); });
        }
        if (r.waiting == 0) advance(self, id);
        return rp;
      },
      [=](members_atom, inspect_query& q) { return inspect_cluster(self, q); },
      [=](tick_atom, uint64_t id) {
        // Only our own deadline timer: the interface is published, and a remote peer must not
        // end other peers' queries.
        if (self->current_sender() == caf::actor_cast<caf::strong_actor_ptr>(self))
          expire(self, id);
      },
  };
}

}  // namespace

actor_stats log_stats(const wal_writer& wal) {
  auto s = wal.get_stats();
  actor_stats a{"log", 0};
  a.state = s.failed ? "failed" : "ok";
  a.mailbox = s.queued;  // its queue is its mailbox
  a.num("queued", s.queued);
  a.num("appends", s.appends);
  a.num("records", s.records);
  a.num("batches", s.batches);
  a.num("batchesInline", s.batches_inline);
  a.num("holdsMet", s.holds_met);
  a.num("holdsMissed", s.holds_missed);
  a.num("committing", s.committing ? 1 : 0);  // a thread holds the committer role now
  a.num("fsyncs", s.fsyncs);
  a.num("bytesWritten", s.bytes_written);
  a.num("refused", s.refused);
  a.num("checkpoints", s.checkpoints);
  a.num("grantsWithoutFsync", s.grants_without_fsync);
  a.num("segments", s.segments);
  a.num("retiredSegments", s.retired_segments);
  a.text("failure", s.failure);
  a.num("spareFailures", s.spare_failures);
  a.text("spareFailure", s.spare_failure);
  a.num("checkpointFailures", s.checkpoint_failures);
  a.text("checkpointFailure", s.checkpoint_failure);
  a.histograms.push_back(s.fsync_seconds);
  a.histograms.push_back(s.records_per_fsync);
  a.histograms.push_back(s.roll_seconds);
  return a;
}

inspector_actor spawn_inspector(caf::actor_system& sys, inspector_targets targets) {
  return sys.spawn(inspector_fn, std::move(targets));
}

}  // namespace fusee::server
