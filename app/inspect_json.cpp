#include "app/inspect_json.hpp"

#include <cmath>
#include <sstream>

#include "protocol/json_text.hpp"

namespace fusee::app {

namespace {

using proto::json_quote;

std::string number(double v) {
  if (!std::isfinite(v)) return "0";
  std::ostringstream o;
  o.precision(9);
  o << v;
  return o.str();
}

void histogram_json(std::ostringstream& o, const server::histogram& h) {
  o << json_quote(h.name) << ":{\"bounds\":[";
  for (size_t i = 0; i < h.bounds.size(); ++i)
    o << (i ? "," : "") << number(h.bounds[i]);
  o << "],\"counts\":[";
  for (size_t i = 0; i < h.counts.size(); ++i)
    o << (i ? "," : "") << h.counts[i];
  o << "],\"count\":" << h.count << ",\"sum\":" << number(h.sum)
    << ",\"p50\":" << number(h.quantile(0.5)) << ",\"p99\":" << number(h.quantile(0.99)) << "}";
}

void values_json(std::ostringstream& o, const std::vector<server::stat_value>& values) {
  for (auto& v : values) {
    o << "," << json_quote(v.key) << ":";
    if (v.is_text)
      o << json_quote(v.text);
    else
      o << v.number;
  }
}

}  // namespace

std::string row_json(const server::actor_stats& row) {
  std::ostringstream o;
  o << "{\"kind\":" << json_quote(row.kind) << ",\"id\":" << row.id
    << ",\"state\":" << json_quote(row.state) << ",\"mailbox\":" << row.mailbox
    << ",\"answered\":" << (row.answered ? "true" : "false");
  values_json(o, row.values);
  if (!row.histograms.empty()) {
    o << ",\"histograms\":{";
    for (size_t i = 0; i < row.histograms.size(); ++i) {
      if (i) o << ",";
      histogram_json(o, row.histograms[i]);
    }
    o << "}";
  }
  o << "}";
  return o.str();
}

std::string reply_json(const server::inspect_reply& r, uint32_t offset) {
  std::ostringstream o;
  o << "{\"node\":" << json_quote(r.node) << ",\"shards\":" << r.shards
    << ",\"matched\":" << r.matched << ",\"offset\":" << offset << ",\"rows\":[";
  for (size_t i = 0; i < r.rows.size(); ++i)
    o << (i ? "," : "") << row_json(r.rows[i]);
  o << "],\"states\":{";
  for (size_t i = 0; i < r.states.size(); ++i)
    o << (i ? "," : "") << json_quote(r.states[i].state) << ":" << r.states[i].count;
  o << "},\"kinds\":[";
  for (size_t i = 0; i < r.kinds.size(); ++i) {
    auto& k = r.kinds[i];
    o << (i ? "," : "") << "{\"kind\":" << json_quote(k.kind) << ",\"actors\":" << k.actors
      << ",\"asked\":" << k.asked << ",\"missed\":" << k.missed
      << ",\"mailboxTotal\":" << k.mailbox_total << ",\"mailboxMax\":" << k.mailbox_max
      << ",\"totals\":{";
    for (size_t j = 0; j < k.totals.size(); ++j)
      o << (j ? "," : "") << json_quote(k.totals[j].key) << ":" << k.totals[j].number;
    o << "}}";
  }
  o << "],\"noAnswer\":[";
  for (size_t i = 0; i < r.no_answer.size(); ++i)
    o << (i ? "," : "") << json_quote(r.no_answer[i]);
  o << "],\"tookUs\":" << r.took_us;
  if (!r.grid.empty()) o << ",\"grid\":" << json_quote(r.grid);
  o << "}";
  return o.str();
}

namespace {

void member_json(std::ostringstream& o, const server::cluster_member& m) {
  o << "\"name\":" << json_quote(m.name) << ",\"state\":" << json_quote(m.state)
    << ",\"error\":" << json_quote(m.error) << ",\"sinceMs\":" << m.since_ms
    << ",\"cluster\":" << json_quote(m.cluster) << ",\"listen\":" << json_quote(m.listen)
    << ",\"http\":" << json_quote(m.http) << ",\"shards\":" << json_quote(m.shards)
    << ",\"callsForwarded\":" << m.calls_forwarded << ",\"callsFailedFast\":" << m.calls_failed_fast
    << ",\"messagesForwarded\":" << m.messages_forwarded;
}

}  // namespace

std::string members_json(const std::vector<server::cluster_member>& members) {
  std::ostringstream o;
  o << "[";
  for (size_t i = 0; i < members.size(); ++i) {
    o << (i ? ",{" : "{");
    member_json(o, members[i]);
    o << "}";
  }
  o << "]";
  return o.str();
}

std::string cluster_json(const server::cluster_reply& reply, uint32_t offset) {
  std::ostringstream o;
  o << "{\"nodes\":[";
  for (size_t i = 0; i < reply.nodes.size(); ++i) {
    auto& n = reply.nodes[i];
    o << (i ? ",{" : "{");
    member_json(o, n.member);
    o << ",\"answered\":" << (n.answered ? "true" : "false")
      << ",\"reason\":" << json_quote(n.error);
    o << ",\"reply\":" << (n.answered ? reply_json(n.reply, offset) : "null");
    o << "}";
  }
  o << "],\"tookUs\":" << reply.took_us << "}";
  return o.str();
}

}  // namespace fusee::app
