#include "app/prometheus.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "actors/inspect/query.hpp"
#include "actors/inspect/shard_state.hpp"
#include "logging/logging.hpp"

namespace fusee::app {

namespace {

using server::actor_stats;
using server::histogram;
using server::logging::quoted;  // the text format escapes label values as log fields are

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  std::ostringstream o;
  o.precision(10);
  o << v;
  return o.str();
}

/// A metric read from one key of an actor's stats row.
struct row_metric {
  const char* name;
  const char* type;
  const char* help;
  const char* key;
};

// The metrics each singleton's row gives, once each (docs/operations.md lists them all).
const row_metric log_metrics[] = {
    {"log_appends_total", "counter", "APPEND requests written to the log.", "appends"},
    {"log_records_total", "counter", "Records written and fsync'ed.", "records"},
    {"log_fsyncs_total", "counter", "fdatasync calls of the log.", "fsyncs"},
    {"log_batches_inline_total", "counter",
     "Batches written by the I/O thread that read their requests (no hand-off).", "batchesInline"},
    {"log_holds_met_total", "counter",
     "Commits held for the sessions just told DURABLE until each had appended again.", "holdsMet"},
    {"log_holds_missed_total", "counter",
     "Commits held for the sessions just told DURABLE that ran out first (later holds back off).",
     "holdsMissed"},
    {"log_written_bytes_total", "counter", "Bytes of batches written and fsync'ed.",
     "bytesWritten"},
    {"log_refused_total", "counter", "Requests the log refused (fencing, LSN gaps, a failed disk).",
     "refused"},
    {"log_checkpoints_total", "counter", "Checkpoints stored.", "checkpoints"},
    {"log_grants_without_fsync_total", "counter",
     "Lease grants reported without an fdatasync of their own (within the epoch reservation).",
     "grantsWithoutFsync"},
    {"log_queued_entries", "gauge", "Entries waiting to be committed to the log.", "queued"},
    {"log_segments", "gauge", "Segment files of the log.", "segments"},
    {"log_spare_failures_total", "counter",
     "Background zero-fills of the next segment that failed (the roll filled one itself).",
     "spareFailures"},
    {"log_checkpoint_failures_total", "counter",
     "Checkpoints that could not be stored (no segment is retired until one is).",
     "checkpointFailures"},
};
const row_metric directory_metrics[] = {
    {"leases_granted_total", "counter", "Leases granted (each a durable epoch).", "leasesGranted"},
    {"leases_revoked_total", "counter", "Leases ended by the log (revocations).", "leasesRevoked"},
    {"shards_blocked", "gauge",
     "Shards whose grant or revocation the failed log could not make: no holder until restart.",
     "shardsBlocked"},
    {"calls_total", "counter", "Calls received (protocol and HTTP API).", "calls"},
    {"calls_parked_total", "counter", "Calls that waited for a holder.", "callsParked"},
    {"calls_expired_total", "counter", "Parked calls that no holder took in time.", "callsExpired"},
    {"relays_total", "counter", "Messages between shards relayed.", "relays"},
    {"parked_refused_total", "counter",
     "Calls refused and messages dropped (resent later) over the parking limits.", "parkedRefused"},
    {"parked_calls", "gauge", "Calls waiting for a holder now.", "parkedCalls"},
    {"parked_messages", "gauge", "Messages waiting for a holder now.", "parkedMessages"},
    {"calls_in_flight", "gauge", "Calls relayed to a holder and not yet answered.",
     "callsInFlight"},
    {"workers", "gauge", "Long-lived worker connections.", "workers"},
    {"invoked_workers", "gauge", "Invoked worker connections.", "invokedWorkers"},
    {"wake_record_actors", "gauge",
     "Shards whose wake record is an actor now (the others rest in 48 bytes).", "recordActors"},
    {"wake_records_retired_total", "counter", "Wake records retired to their resting state.",
     "recordsRetired"},
};
const row_metric cluster_metrics[] = {
    {"cluster_nodes", "gauge", "Nodes in the cluster map (this one included).", "nodes"},
    {"cluster_peers_up", "gauge", "Other nodes linked and up.", "peersUp"},
    {"cluster_calls_forwarded_total", "counter", "Calls forwarded to the node serving the shard.",
     "callsForwarded"},
    {"cluster_calls_failed_fast_total", "counter",
     "Calls answered at once because the node serving the shard was not up.", "callsFailedFast"},
    {"cluster_calls_waiting", "gauge", "Forwarded calls waiting for their answer.", "callsWaiting"},
    {"cluster_messages_forwarded_total", "counter", "Messages relayed to another node.",
     "messagesForwarded"},
    {"cluster_messages_held", "gauge", "Messages kept for a node that is not up, sent when it is.",
     "messagesHeld"},
    {"cluster_messages_dropped_total", "counter",
     "Messages for a node that was not up, past what is held for it (their senders resend "
     "them).",
     "messagesDropped"},
};
const row_metric scheduler_metrics[] = {
    {"shard_handbacks_total", "counter", "Shards handed back with work left.", "handbacks"},
    {"shard_crashes_total", "counter",
     "Leases that ended without a report (crash, revocation, silence).", "crashes"},
    {"shard_no_progress_total", "counter",
     "Leases that spent their invocation's budget without finishing a step, or ran out budget + "
     "grace with nothing written.",
     "noProgress"},
    {"invocations_in_flight", "gauge", "Invocations sent and not yet ended.",
     "invocationsInFlight"},
};

/// Collects samples by family and writes each family whole (HELP, TYPE, then its samples, as
/// the text format requires), in the order families were first used.
class writer {
public:
  void metric(const std::string& name, const char* type, const char* help, double v,
              const std::string& labels = {}) {
    sample(family(name, type, help), name, labels, v);
  }
  void hist(const std::string& name, const char* help, const histogram& h,
            const std::string& labels = {}) {
    auto& f = family(name, "histogram", help);
    std::string sep = labels.empty() ? "" : labels + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      sample(f, name + "_bucket", sep + "le=\"" + num(h.bounds[i]) + "\"", double(cumulative));
    }
    sample(f, name + "_bucket", sep + "le=\"+Inf\"", double(h.count));
    sample(f, name + "_sum", labels, h.sum);
    sample(f, name + "_count", labels, double(h.count));
  }
  template <size_t N>
  void from_row(const actor_stats& row, const row_metric (&table)[N]) {
    for (auto& m : table)
      metric(m.name, m.type, m.help, double(row.number(m.key)));
  }
  std::string str() const {
    std::ostringstream out;
    for (auto& name : order_) {
      auto& f = families_.at(name);
      out << "# HELP fusee_" << name << " " << f.help << "\n# TYPE fusee_" << name << " " << f.type
          << "\n"
          << f.samples;
    }
    return out.str();
  }

private:
  struct family_text {
    std::string type, help, samples;
  };
  family_text& family(const std::string& name, const char* type, const char* help) {
    auto [it, fresh] = families_.try_emplace(name);
    if (fresh) {
      order_.push_back(name);
      it->second.type = type;
      it->second.help = help;
    }
    return it->second;
  }
  static void sample(family_text& f, const std::string& series, const std::string& labels,
                     double v) {
    f.samples += "fusee_" + series;
    if (!labels.empty()) f.samples += "{" + labels + "}";
    f.samples += " " + num(v) + "\n";
  }
  std::vector<std::string> order_;
  std::map<std::string, family_text> families_;
};

/// The first row of `kind` that answered. A row that missed the deadline is left out of the
/// scrape (its series go missing once) rather than reported as zeros, which Prometheus would
/// take for counter resets.
const actor_stats* first_of(const server::inspect_reply& r, const std::string& kind) {
  for (auto& row : r.rows)
    if (row.kind == kind && row.answered) return &row;
  return nullptr;
}

const histogram* histogram_of(const actor_stats& row, const std::string& name) {
  for (auto& h : row.histograms)
    if (h.name == name) return &h;
  return nullptr;
}

}  // namespace

std::string render_metrics(const server::inspect_reply& actors, const server::inspect_reply& shards,
                           const guard_counts& guards) {
  writer w;
  w.metric("build_info", "gauge", "Always 1; the labels name the build.", 1,
           "version=\"" FUSEE_VERSION "\"");
  std::map<std::string, uint64_t> by_state;  // shards per state word
  for (auto& s : shards.states)
    by_state[s.state] = s.count;
  // (A cluster's other nodes' shards are `elsewhere`.)
  uint64_t elsewhere = by_state[std::string{server::state_name(server::shard_state::elsewhere)}];
  w.metric("shards", "gauge", "Shards this node serves (in a cluster, its part).",
           double(actors.shards - std::min<uint64_t>(elsewhere, actors.shards)));
  if (guards.connections)
    w.metric("connections", "gauge", "Worker and client connections open.",
             double(*guards.connections));
  for (auto& [listener, n] : guards.http_connections)
    w.metric("http_connections", "gauge",
             "HTTP connections open, by listener (each at most limits.max_http_connections).",
             double(n), "listener=\"" + listener + "\"");
  for (auto& [listener, n] : guards.http_clients_gone)
    w.metric("http_clients_gone_total", "counter",
             "Requests whose client closed its connection while they waited (answered at once, "
             "to nobody, so the connection closed), by listener.",
             double(n), "listener=\"" + listener + "\"");
  if (guards.io_turn_seconds)
    w.metric("io_longest_turn_seconds", "gauge",
             "The longest turn of an I/O thread (not waiting for its sockets) since the last "
             "gathering of these metrics, one going on included: with one thread, its reads and "
             "the log's commit, during which nothing is read and liveness pauses.",
             *guards.io_turn_seconds);
  for (auto& [limit, n] : guards.limit_refused)
    w.metric("limit_refused_total", "counter",
             "Connections refused or closed by a limit (limits.*), by limit.", double(n),
             "limit=\"" + limit + "\"");
  for (auto& t : guards.tls)
    for (auto [outcome, n] :
         {std::pair{"done", t.done}, std::pair{"failed", t.failed},
          std::pair{"timed_out", t.timed_out}, std::pair{"plaintext", t.plaintext}})
      w.metric("tls_handshakes_total", "counter",
               "TLS handshakes by listener and outcome (plaintext: the peer did not speak TLS).",
               double(n), "listener=\"" + t.name + "\",outcome=\"" + outcome + "\"");
  if (auto& auth = guards.auth) {
    w.metric("auth_tokens", "gauge", "Tokens this node accepts ([[token]], reread on SIGHUP).",
             double(auth->tokens));
    w.metric("auth_refused_total", "counter",
             "Connections and requests refused for a missing, wrong or too weak token.",
             double(auth->refused));
    w.metric("auth_reloads_total", "counter", "Token files reread after SIGHUP.",
             double(auth->reloads));
  }

  if (auto* log = first_of(actors, "log")) {
    w.from_row(*log, log_metrics);
    w.metric("log_failed", "gauge", "1 once a write or fsync failed (appends are refused).",
             log->state == "failed" ? 1 : 0);
    if (auto* h = histogram_of(*log, "fsync_seconds"))
      w.hist("log_fsync_seconds", "Time to write and fdatasync one batch.", *h);
    if (auto* h = histogram_of(*log, "records_per_fsync"))
      w.hist("log_batch_records", "Records made durable by one fdatasync.", *h);
    if (auto* h = histogram_of(*log, "roll_seconds"))
      w.hist("log_roll_seconds",
             "Time to roll to a new segment (the spare's zeros if not done, header, snapshot).",
             *h);
  }

  if (auto* d = first_of(actors, "directory")) w.from_row(*d, directory_metrics);
  if (auto* c = first_of(actors, "cluster")) w.from_row(*c, cluster_metrics);

  // Shards per state, every state present (zero when none).
  for (auto st : server::all_shard_states) {
    std::string name(server::state_name(st));
    w.metric("shards_by_state", "gauge", "Shards per state (docs/operations.md).",
             double(by_state[name]), "state=\"" + name + "\"");
  }

  if (auto* s = first_of(actors, "scheduler")) w.from_row(*s, scheduler_metrics);

  // Endpoints are labelled by their index in the configuration (two may share a URL);
  // endpoint_info maps the index to the URL (shown without credentials).
  for (auto& e : actors.rows) {
    if (e.kind != "endpoint" || !e.answered) continue;
    std::string ep = "endpoint=\"" + std::to_string(e.id) + "\"";
    auto url = e.find("url");
    w.metric("endpoint_info", "gauge", "Always 1; names each configured endpoint's URL.", 1,
             ep + ",url=" + quoted(url ? url->text : ""));
    for (auto [key, outcome] :
         {std::pair{"succeeded", "succeeded"}, std::pair{"failed", "failed"},
          std::pair{"timedOut", "timed_out"}, std::pair{"unleased", "unleased"},
          std::pair{"preempted", "preempted"}})
      w.metric("invocations_total", "counter", "Invocations ended, by endpoint and outcome.",
               double(e.number(key)), ep + ",outcome=\"" + outcome + "\"");
    w.metric("endpoint_in_flight", "gauge", "Invocations in flight per endpoint.",
             double(e.number("inFlight")), ep);
    w.metric("endpoint_backoffs_total", "counter",
             "Failed invocations that made the endpoint back off.", double(e.number("backoffs")),
             ep);
    w.metric("endpoint_backoff_seconds", "gauge",
             "Time left of the endpoint's backoff (a call waiting is still sent as a probe).",
             double(e.number("backoffMs")) / 1000.0, ep);
    if (auto* h = histogram_of(e, "invocation_duration_seconds"))
      w.hist("invocation_duration_seconds", "From POST sent to its answer.", *h, ep);
  }

  // Sessions by role, and what waits to be written to them.
  {
    std::map<std::string, uint64_t> roles{
        {"handshake", 0}, {"worker", 0}, {"invoked", 0}, {"client", 0}};
    uint64_t waiting = 0;
    for (auto& s : actors.states)  // every matched session, not only the page's rows
      if (roles.count(s.state)) roles[s.state] = s.count;
    for (auto& k : actors.kinds)
      if (k.kind == "session")
        for (auto& t : k.totals)
          if (t.key == "bytesWaiting") waiting = static_cast<uint64_t>(t.number);
    for (auto& [role, n] : roles)
      w.metric("sessions", "gauge", "Open connections by role.", double(n),
               "role=\"" + role + "\"");
    w.metric("session_waiting_bytes", "gauge",
             "Bytes waiting to be written to connections, all sessions.", double(waiting));
  }

  // Mailboxes by actor kind: every actor asked, but shards only in a spread sample of 1000 (those
  // that missed the deadline count as 0).
  std::vector<server::kind_summary> kinds = actors.kinds;
  for (auto& k : shards.kinds)
    kinds.push_back(k);
  for (auto& k : kinds)
    w.metric("actors", "gauge", "Actors by kind.", double(k.actors), "kind=" + quoted(k.kind));
  for (auto& k : kinds)
    w.metric("actor_mailbox_messages", "gauge",
             "Messages waiting in mailboxes, by actor kind (shards: a sample of 1000).",
             double(k.mailbox_total), "kind=" + quoted(k.kind));
  for (auto& k : kinds)
    w.metric("actor_mailbox_max_messages", "gauge",
             "The longest mailbox of each actor kind (shards: of a sample of 1000).",
             double(k.mailbox_max), "kind=" + quoted(k.kind));
  for (auto& k : kinds)
    w.metric("actor_no_answer", "gauge",
             "Actors that did not answer the scrape's stats request in time, by kind.",
             double(k.missed), "kind=" + quoted(k.kind));
  w.metric("inspect_duration_seconds", "gauge", "How long gathering this scrape took.",
           double(actors.took_us + shards.took_us) / 1e6);
  return w.str();
}

}  // namespace fusee::app
