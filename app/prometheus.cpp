#include "app/prometheus.hpp"

#include <cmath>
#include <map>
#include <sstream>

#include "actors/inspect/query.hpp"
#include "actors/inspect/shard_state.hpp"

namespace fusee::app {

namespace {

using server::actor_stats;
using server::histogram;

std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  std::ostringstream o;
  o.precision(10);
  o << v;
  return o.str();
}

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

std::string render_metrics(const server::inspect_reply& actors,
                           const server::inspect_reply& shards) {
  writer w;
  w.metric("build_info", "gauge", "Always 1; the labels name the build.", 1,
           "version=\"" FUSEE_VERSION "\"");
  w.metric("shards", "gauge", "Shards on this node.", actors.shards);

  if (auto* log = first_of(actors, "log")) {
    w.metric("log_appends_total", "counter", "APPEND requests written to the log.",
             double(log->number("appends")));
    w.metric("log_records_total", "counter", "Records written and fsync'ed.",
             double(log->number("records")));
    w.metric("log_fsyncs_total", "counter", "fdatasync calls of the log.",
             double(log->number("fsyncs")));
    w.metric("log_written_bytes_total", "counter", "Bytes of batches written and fsync'ed.",
             double(log->number("bytesWritten")));
    w.metric("log_refused_total", "counter",
             "Requests the log refused (fencing, LSN gaps, a failed disk).",
             double(log->number("refused")));
    w.metric("log_checkpoints_total", "counter", "Checkpoints stored.",
             double(log->number("checkpoints")));
    w.metric("log_queued_entries", "gauge", "Entries waiting for the log's writer thread.",
             double(log->number("queued")));
    w.metric("log_segments", "gauge", "Segment files of the log.", double(log->number("segments")));
    w.metric("log_failed", "gauge", "1 once a write or fsync failed (appends are refused).",
             log->state == "failed" ? 1 : 0);
    if (auto* h = histogram_of(*log, "fsync_seconds"))
      w.hist("log_fsync_seconds", "Time to write and fdatasync one batch.", *h);
    if (auto* h = histogram_of(*log, "records_per_fsync"))
      w.hist("log_batch_records", "Records made durable by one fdatasync.", *h);
  }

  if (auto* d = first_of(actors, "directory")) {
    w.metric("leases_granted_total", "counter", "Leases granted (each a durable epoch).",
             double(d->number("leasesGranted")));
    w.metric("leases_revoked_total", "counter", "Leases ended by the log (revocations).",
             double(d->number("leasesRevoked")));
    w.metric("calls_total", "counter", "Calls received (protocol and HTTP API).",
             double(d->number("calls")));
    w.metric("calls_parked_total", "counter", "Calls that waited for a holder.",
             double(d->number("callsParked")));
    w.metric("calls_expired_total", "counter", "Parked calls that no holder took in time.",
             double(d->number("callsExpired")));
    w.metric("relays_total", "counter", "Messages between shards relayed.",
             double(d->number("relays")));
    w.metric("parked_calls", "gauge", "Calls waiting for a holder now.",
             double(d->number("parkedCalls")));
    w.metric("parked_messages", "gauge", "Messages waiting for a holder now.",
             double(d->number("parkedMessages")));
    w.metric("calls_in_flight", "gauge", "Calls relayed to a holder and not yet answered.",
             double(d->number("callsInFlight")));
    w.metric("workers", "gauge", "Long-lived worker connections.", double(d->number("workers")));
    w.metric("invoked_workers", "gauge", "Invoked worker connections.",
             double(d->number("invokedWorkers")));
  }

  // Shards per state, every state present (zero when none).
  {
    std::map<std::string, uint64_t> by_state;
    for (auto& s : shards.states)
      by_state[s.state] = s.count;
    for (auto st :
         {server::shard_state::held, server::shard_state::invoking, server::shard_state::backoff,
          server::shard_state::due, server::shard_state::waiting, server::shard_state::idle}) {
      std::string name(server::state_name(st));
      w.metric("shards_by_state", "gauge", "Shards per state (docs/operations.md).",
               double(by_state[name]), "state=\"" + name + "\"");
    }
  }

  if (auto* s = first_of(actors, "scheduler")) {
    w.metric("shard_handbacks_total", "counter", "Shards handed back with work left.",
             double(s->number("handbacks")));
    w.metric("shard_crashes_total", "counter",
             "Leases that ended without a report (crash, revocation, silence).",
             double(s->number("crashes")));
    w.metric("shard_no_progress_total", "counter",
             "Invocations that spent their budget without finishing a step.",
             double(s->number("noProgress")));
    w.metric("invocations_in_flight", "gauge", "Invocations sent and not yet ended.",
             double(s->number("invocationsInFlight")));
  }

  // Endpoints are labelled by their index in the configuration (two may share a URL);
  // endpoint_info maps the index to the URL (shown without credentials).
  for (auto& e : actors.rows) {
    if (e.kind != "endpoint" || !e.answered) continue;
    std::string ep = "endpoint=\"" + std::to_string(e.id) + "\"";
    auto url = e.find("url");
    w.metric("endpoint_info", "gauge", "Always 1; names each configured endpoint's URL.", 1,
             ep + ",url=\"" + label_value(url ? url->text : "") + "\"");
    for (auto [key, outcome] :
         {std::pair{"succeeded", "succeeded"}, std::pair{"failed", "failed"},
          std::pair{"timedOut", "timed_out"}, std::pair{"unleased", "unleased"}})
      w.metric("invocations_total", "counter", "Invocations ended, by endpoint and outcome.",
               double(e.number(key)), ep + ",outcome=\"" + outcome + "\"");
    w.metric("endpoint_in_flight", "gauge", "Invocations in flight per endpoint.",
             double(e.number("inFlight")), ep);
    w.metric("endpoint_backoffs_total", "counter",
             "Failed invocations that made the endpoint back off.", double(e.number("backoffs")),
             ep);
    w.metric("endpoint_backoff_seconds", "gauge",
             "Time left before the endpoint takes new invocations.",
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
    w.metric("actors", "gauge", "Actors by kind.", double(k.actors),
             "kind=\"" + label_value(k.kind) + "\"");
  for (auto& k : kinds)
    w.metric("actor_mailbox_messages", "gauge",
             "Messages waiting in mailboxes, by actor kind (shards: a sample of 1000).",
             double(k.mailbox_total), "kind=\"" + label_value(k.kind) + "\"");
  for (auto& k : kinds)
    w.metric("actor_mailbox_max_messages", "gauge",
             "The longest mailbox of each actor kind (shards: of a sample of 1000).",
             double(k.mailbox_max), "kind=\"" + label_value(k.kind) + "\"");
  for (auto& k : kinds)
    w.metric("actor_no_answer", "gauge",
             "Actors that did not answer the scrape's stats request in time, by kind.",
             double(k.missed), "kind=\"" + label_value(k.kind) + "\"");
  w.metric("inspect_duration_seconds", "gauge", "How long gathering this scrape took.",
           double(actors.took_us + shards.took_us) / 1e6);
  return w.str();
}

}  // namespace fusee::app
