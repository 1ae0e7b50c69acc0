#include "app/inspect_command.hpp"

#include <csignal>
#include <cstdio>
#include <future>
#include <thread>

#include <unistd.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/inspect/inspector.hpp"
#include "actors/inspect/query.hpp"
#include "actors/message_types.hpp"
#include "actors/net/descriptor_budget.hpp"
#include "app/inspect_json.hpp"
#include "client/address.hpp"

namespace fusee::app {

namespace {

struct cli_config : caf::actor_system_config {
  cli_config() {
    server::add_server_types(*this);  // the same names as on the node (STACK.md §5.8)
    load<caf::io::middleman>();
    set("scheduler.max-threads", 1);
    // A clustered node cuts links silent for its peer timeout: keep this one talking.
    set("middleman.heartbeat-interval", caf::timespan{std::chrono::milliseconds(250)});
  }
};

volatile std::sig_atomic_t interrupted = 0;

std::string value_text(const server::stat_value& v) {
  if (!v.is_text) return std::to_string(v.number);
  if (v.text.find_first_of(" \t\"") == std::string::npos) return v.text;
  std::string out = "\"";
  for (char c : v.text)
    out += c == '"' ? std::string("\\\"") : std::string(1, c);
  return out + "\"";
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

/// The table: one row per actor (kind, id, state, mailbox, then its values as key=value, empty
/// texts left out), the states counted, the grid (--grid 1: 64 shards a line, each line led by
/// its first shard, counted from `first_shard`), and the footer "showing N of M, took X ms".
std::string table(const server::inspect_reply& r, uint32_t offset, uint32_t first_shard) {
  std::string out = "node " + r.node + " · " + std::to_string(r.shards) + " shards\n";
  out += pad("KIND", 10) + pad("ID", 22) + pad("STATE", 11) + pad("MAILBOX", 8) + "DETAILS\n";
  for (auto& row : r.rows) {
    std::string details;
    for (auto& v : row.values) {
      if (v.is_text && v.text.empty()) continue;
      details += (details.empty() ? "" : " ") + v.key + "=" + value_text(v);
    }
    for (auto& h : row.histograms)
      if (h.count > 0) {
        char buf[128];
        std::snprintf(buf, sizeof(buf), " %s(p50=%.6g p99=%.6g n=%llu)", h.name.c_str(),
                      h.quantile(0.5), h.quantile(0.99), static_cast<unsigned long long>(h.count));
        details += buf;
      }
    out += pad(row.kind, 10) + pad(std::to_string(row.id), 22) +
           pad(row.answered ? row.state : row.state + "?", 11) +
           pad(row.answered ? std::to_string(row.mailbox) : "-", 8) + details + "\n";
  }
  if (!r.states.empty()) {
    out += "states:";
    for (auto& s : r.states)
      out += " " + s.state + "=" + std::to_string(s.count);
    out += "\n";
  }
  if (!r.grid.empty()) {
    out += "grid (H held, X blocked, I invoking, B backoff, D due, W waiting, . idle, - another "
           "node's):\n";
    for (size_t at = 0; at < r.grid.size(); at += 64)
      out += pad(std::to_string(uint64_t{first_shard} + at), 10) + r.grid.substr(at, 64) + "\n";
  }
  if (!r.no_answer.empty()) {
    out += "no answer before the deadline:";
    for (auto& n : r.no_answer)
      out += " [" + n + "]";
    out += "\n";
  }
  char footer[160];
  std::snprintf(footer, sizeof(footer), "showing %zu of %llu from %u, took %.1f ms\n",
                r.rows.size(), static_cast<unsigned long long>(r.matched), offset,
                static_cast<double>(r.took_us) / 1000.0);
  return out + footer;
}

/// Each node: a line saying how this node sees it, then its table (or why there is none).
std::string cluster_table(const server::cluster_reply& r, uint32_t offset, uint32_t first_shard) {
  std::string out;
  for (auto& n : r.nodes) {
    auto& m = n.member;
    out += "== node " + (m.name.empty() ? std::string{"(this node)"} : m.name) + " " + m.state;
    if (!m.shards.empty()) out += "  shards " + m.shards;
    if (!m.listen.empty()) out += "  workers " + m.listen;
    if (m.calls_forwarded || m.calls_failed_fast)
      out += "  calls forwarded " + std::to_string(m.calls_forwarded) + ", failed fast " +
             std::to_string(m.calls_failed_fast);
    out += "\n";
    out += n.answered ? table(n.reply, offset, first_shard) : "   (" + n.error + ")\n";
  }
  return out;
}

}  // namespace

int run_inspect(const inspect_command& cmd) {
  auto q = server::parse_query(cmd.query);
  if (!q) {
    std::fprintf(stderr, "fusee inspect: %s\n", q.err().message.c_str());
    return 2;
  }
  auto at = client::parse_host_port(cmd.node);
  if (!at) {
    std::fprintf(stderr, "fusee inspect: --node \"%s\" is not host:port\n", cmd.node.c_str());
    return 2;
  }
  cli_config cfg;
  caf::actor_system sys{cfg};
  // CAF's connect and handshake have no time-out of their own: a port that takes the connection
  // and answers nothing would hold the command for ever.
  auto connecting = std::async(std::launch::async, [&] {
    return sys.middleman().remote_actor<server::inspector_actor>(at->host, at->port);
  });
  auto limit = std::chrono::milliseconds(q->deadline_ms + 5000);  // as a request's, below
  if (connecting.wait_for(limit) != std::future_status::ready) {
    std::fprintf(stderr,
                 "fusee inspect: cannot reach the inspector at %s: no handshake within %llu ms "
                 "(the port took the connection and answered nothing: is this the node's "
                 "inspect_listen port, inspect= in its ready file?)\n",
                 cmd.node.c_str(), static_cast<unsigned long long>(limit.count()));
    std::fflush(stderr);
    std::_Exit(1);  // the connect still waits inside CAF, which would not let the system stop
  }
  auto insp = connecting.get();
  if (!insp) {
    // A node's inspector closes connections over its limits before CAF's handshake.
    auto hint =
        insp.error() == caf::sec::disconnect_during_handshake
            ? "the port took the connection and closed it: is the node's inspector at its "
              "limits (" +
                  std::to_string(server::inspect_connections) +
                  " connections, 8 per address still in their handshake; its log says which)? Or "
                  "is this not the node's inspect_listen port (inspect= in its ready file)?"
            : "is a node running there with server.inspect_listen = \"" + cmd.node + "\"?";
    std::fprintf(stderr, "fusee inspect: cannot reach the inspector at %s: %s (%s)\n",
                 cmd.node.c_str(), sys.render(insp.error()).c_str(), hint.c_str());
    return 1;
  }
  std::signal(SIGINT, [](int) { interrupted = 1; });
  bool tty = ::isatty(STDOUT_FILENO) != 0;
  caf::scoped_actor self{sys};
  for (;;) {
    int rc = 0;
    auto show = [&](const std::string& text) {
      if (cmd.watch && tty) std::fputs("\x1b[H\x1b[2J", stdout);  // refresh in place
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
    };
    auto failed = [&](caf::error& e) {
      std::fprintf(stderr, "fusee inspect: the inspector at %s did not answer: %s\n",
                   cmd.node.c_str(), sys.render(e).c_str());
      rc = 1;
    };
    auto wait = std::chrono::milliseconds(q->deadline_ms + 5000);
    if (cmd.cluster)
      self->request(*insp, wait, server::members_atom::value,
                    cmd.query.empty() ? server::node_actors_query() : *q)
          .receive(
              [&](server::cluster_reply& r) {
                show(cmd.json ? cluster_json(r, q->offset) + "\n"
                              : cluster_table(r, q->offset, q->shard_from));
              },
              failed);
    else
      self->request(*insp, wait, *q)
          .receive(
              [&](server::inspect_reply& r) {
                if (auto missing = server::missing_shard(*q, r.shards)) {  // as the admin's 404
                  std::fprintf(stderr, "fusee inspect: %s\n", missing->c_str());
                  rc = 1;
                  return;
                }
                show(cmd.json ? reply_json(r, q->offset) + "\n"
                              : table(r, q->offset, q->shard_from));
              },
              failed);
    if (!cmd.watch || rc != 0) return rc;
    for (uint32_t waited = 0; waited < cmd.interval_ms && !interrupted; waited += 50)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (interrupted) return 0;
  }
}

}  // namespace fusee::app
