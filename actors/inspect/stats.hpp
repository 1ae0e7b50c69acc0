// What the node's actors say about themselves, and what the inspector gathers: one stats answer
// per actor (kind, id, state word, mailbox, named values, histograms), the bulk views of the
// shards that the directory and the scheduler keep, and the inspector's query and reply. These
// cross the middleman (`fusee inspect`), so every type here is registered in add_server_types().
// The keys each kind reports are listed in docs/operations.md ("Introspection").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/meta/type_name.hpp>

#include "actors/histogram.hpp"

namespace fusee::server {

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, histogram& x) {
  return f(caf::meta::type_name("fusee.histogram"), x.name, x.bounds, x.counts, x.count, x.sum);
}

/// One named value: a number, or a text when `is_text`.
struct stat_value {
  std::string key;
  int64_t number = 0;
  std::string text;
  bool is_text = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, stat_value& x) {
  return f(caf::meta::type_name("fusee.stat_value"), x.key, x.number, x.text, x.is_text);
}

/// One actor's answer to stats_atom.
struct actor_stats {
  std::string kind;   ///< shard, scheduler, endpoint, session, directory, gateway, log
  uint64_t id = 0;    ///< shard number, endpoint index, session id; 0 for the node's singletons
  std::string state;  ///< one word, per kind (docs/operations.md)
  uint64_t mailbox = 0;
  bool answered = true;  ///< false: it did not answer before the query's deadline
  std::vector<stat_value> values;
  std::vector<histogram> histograms;

  actor_stats() = default;
  actor_stats(std::string k, uint64_t i) : kind(std::move(k)), id(i) {}
  template <class Integer>
  actor_stats& num(std::string key, Integer v) {
    values.push_back(stat_value{std::move(key), static_cast<int64_t>(v), {}, false});
    return *this;
  }
  actor_stats& text(std::string key, std::string v) {
    values.push_back(stat_value{std::move(key), 0, std::move(v), true});
    return *this;
  }
  /// The number under `key`, or `fallback`.
  int64_t number(const std::string& key, int64_t fallback = 0) const {
    for (auto& v : values)
      if (v.key == key && !v.is_text) return v.number;
    return fallback;
  }
  const stat_value* find(const std::string& key) const {
    for (auto& v : values)
      if (v.key == key) return &v;
    return nullptr;
  }
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, actor_stats& x) {
  return f(caf::meta::type_name("fusee.actor_stats"), x.kind, x.id, x.state, x.mailbox, x.answered,
           x.values, x.histograms);
}

/// The directory's view of one shard (for the page's shards: lease_details).
struct shard_lease_view {
  uint64_t holder = 0;  ///< session id, 0 = nobody
  uint64_t epoch = 0;
  uint32_t parked_calls = 0;
  uint32_t parked_messages = 0;
  bool serve_calls = false;
  bool draining = false;
  bool busy = false;       ///< a grant or revocation is in the log
  bool withheld = false;   ///< leased to nobody for now (cluster: withheld.hpp)
  bool elsewhere = false;  ///< another node of the cluster serves it
  bool blocked = false;    ///< the log failed: no holder can come before a restart
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_lease_view& x) {
  return f(caf::meta::type_name("fusee.shard_lease_view"), x.holder, x.epoch, x.parked_calls,
           x.parked_messages, x.serve_calls, x.draining, x.busy, x.withheld, x.elsewhere,
           x.blocked);
}

/// The scheduler's view of one shard: its wake record's last status and the invocation it is in.
struct shard_invoker_view {
  uint8_t state = 0;  ///< shard_status::idle, waiting, backoff, ready
  uint8_t reasons = 0;
  int16_t endpoint = -1;
  uint64_t invocation = 0;  ///< 0 = not in an invocation
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_invoker_view& x) {
  return f(caf::meta::type_name("fusee.shard_invoker_view"), x.state, x.reasons, x.endpoint,
           x.invocation);
}

/// The full views of a few shards (the inspector's page) and how many shards each of a few
/// sessions holds. The scheduler reads `shards` only. The bulk view of a range is a byte per
/// shard instead (shard_state.hpp: lease_mark_of, invoker_mark_of).
struct shard_details_request {
  std::vector<uint32_t> shards;  ///< each past the node's shards gets a default view
  std::vector<uint64_t> sessions;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, shard_details_request& x) {
  return f(caf::meta::type_name("fusee.shard_details_request"), x.shards, x.sessions);
}

/// The directory's answer to a shard_details_request, in the request's order.
struct lease_details {
  std::vector<shard_lease_view> shards;
  std::vector<uint64_t> held;  ///< shards held, per session asked (0 for one that is gone)
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, lease_details& x) {
  return f(caf::meta::type_name("fusee.lease_details"), x.shards, x.held);
}

/// Clamps [from, to] to the shards [0, count): false if nothing is left.
inline bool clamp_range(size_t count, uint32_t& from, uint32_t& to) {
  if (count == 0 || from >= count) return false;
  if (to >= count) to = static_cast<uint32_t>(count - 1);
  return from <= to;
}

/// What to inspect. Filters combine (and); rows are ordered by kind, then id, or by mailbox
/// (largest first) with top = "mailbox"; then `offset` and `limit` page them.
struct inspect_query {
  std::string kind;  ///< "" = every kind
  uint32_t shard_from = 0;
  uint32_t shard_to = UINT32_MAX;  ///< inclusive
  std::string state;               ///< "" = any
  std::string top;                 ///< "" or "mailbox"
  uint32_t offset = 0;
  uint32_t limit = 100;  ///< at most max_limit rows
  uint32_t deadline_ms = 1000;
  /// Ask every selected actor, not only the page's shards: for top = "mailbox" and for the
  /// mailbox totals per kind (/metrics). Costs one message per shard.
  bool every_actor = false;
  bool grid = false;  ///< fill inspect_reply::grid
  /// With every_actor: ask at most this many shards, evenly spread (0 = all). A scrape uses it:
  /// asking 100,000 shards costs seconds of CPU.
  uint32_t sample = 0;

  static constexpr uint32_t max_limit = 5000;
  static constexpr uint32_t max_deadline_ms = 30000;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inspect_query& x) {
  return f(caf::meta::type_name("fusee.inspect_query"), x.kind, x.shard_from, x.shard_to, x.state,
           x.top, x.offset, x.limit, x.deadline_ms, x.every_actor, x.grid, x.sample);
}

/// Totals for one kind over the actors the query selected (before paging).
struct kind_summary {
  std::string kind;
  uint64_t actors = 0;
  uint64_t asked = 0;   ///< asked for their stats (all, a sample, or the page's)
  uint64_t missed = 0;  ///< asked, and no answer before the deadline
  uint64_t mailbox_total = 0;
  uint64_t mailbox_max = 0;
  std::vector<stat_value> totals;  ///< each number key summed over the rows that answered
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kind_summary& x) {
  return f(caf::meta::type_name("fusee.kind_summary"), x.kind, x.actors, x.asked, x.missed,
           x.mailbox_total, x.mailbox_max, x.totals);
}

struct state_count {
  std::string state;
  uint64_t count = 0;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, state_count& x) {
  return f(caf::meta::type_name("fusee.state_count"), x.state, x.count);
}

struct inspect_reply {
  std::string node;      ///< the node's name (its worker listen address)
  uint64_t matched = 0;  ///< rows that passed the filters (the page is a part of them)
  std::vector<actor_stats> rows;
  std::vector<std::string> no_answer;  ///< "shard 12", "endpoint 0": missed the deadline
  std::vector<state_count> states;     ///< rows per state, over every matched row
  std::vector<kind_summary> kinds;
  std::string grid;  ///< one character per shard of the range (query.grid), see shard_state.hpp
  uint64_t took_us = 0;
  uint32_t shards = 0;  ///< shards on the node
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, inspect_reply& x) {
  return f(caf::meta::type_name("fusee.inspect_reply"), x.node, x.matched, x.rows, x.no_answer,
           x.states, x.kinds, x.grid, x.took_us, x.shards);
}

}  // namespace fusee::server
