#include "actors/cluster/cluster.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/call_gateway.hpp"
#include "actors/cluster/held_messages.hpp"
#include "actors/cluster/map_agreement.hpp"
#include "actors/cluster/shard_owners.hpp"
#include "actors/session.hpp"
#include "client/address.hpp"
#include "logging/logging.hpp"
#include "protocol/frame.hpp"
#include "protocol/messages.hpp"
#include "protocol/unix_time.hpp"

namespace fusee::server {

namespace {

using ms = std::chrono::milliseconds;

/// How this node sees another (cluster_member::state by link_name()).
enum class link : uint8_t { self, connecting, up, down, refused };

const char* link_name(link l) {
  switch (l) {
  case link::self:
    return "self";
  case link::connecting:
    return "connecting";
  case link::up:
    return "up";
  case link::down:
    return "down";
  case link::refused:
    return "refused";
  }
  return "?";
}

struct peer {
  proto::cluster_node node;
  std::string dial;  ///< where the middleman connects: node.cluster, or a loopback TLS tunnel
  link state = link::connecting;
  std::string error = "not dialled yet";
  int64_t since_ms = 0;
  cluster_actor handle;  ///< while up
  caf::strong_actor_ptr inspector;
  uint64_t generation = 0;  ///< of the dial in progress; older answers are ignored
  bool dialing = false;     ///< probe, connect and handshake under way (one dial at a time)
  ms backoff{100};
  std::string refused_digest;  ///< the last differing digest it sent, logged once
  std::string refusal_logged;  ///< the last refusal it answered our dial with, logged once
  std::string shadow_logged;   ///< the last other process calling itself this node, logged once
  bool answered = false;       ///< the dial under way found its port answering (probe)
  uint64_t calls_forwarded = 0, calls_failed_fast = 0, messages_forwarded = 0, messages_dropped = 0;
  /// Messages for its shards that came while it was not up: sent the moment it is, so they
  /// need not wait for their senders' next resend (receivers deduplicate).
  held_messages held;
};

/// A CALL forwarded to another node, waiting for its CALL_RESULT.
struct forwarded_call {
  session_actor client;
  uint64_t request = 0;
  size_t peer = 0;
  caf::actor_clock::time_point deadline{};
};

struct cluster_state {
  cluster_state() = default;  // not an aggregate: CAF would build it from the self pointer
  node_settings cfg;
  shard_owners owners;
  directory_actor directory;
  caf::strong_actor_ptr inspector;
  std::string digest, canonical;
  std::vector<peer> peers;  ///< by index in the map; this node's entry is unused
  std::unordered_map<uint64_t, forwarded_call> waiting;
  map_agreement agreement;  ///< what this node withholds (the start's hold, the contests)
  bool dialled = false;     ///< told to dial (dial_atom, once published)
  caf::actor_clock::time_point started{};
  uint64_t next_ticket = 1;
  bool ticking = false;  ///< a tick is pending (only while calls wait: a timer delays shutdown)
  session_id id = 0;
  uint64_t calls_in = 0, messages_in = 0;
  static inline const char* name = "fusee.cluster";
};

using self_ptr = cluster_actor::stateful_pointer<cluster_state>;

ms peer_timeout(const cluster_state& st) {
  return ms(st.cfg.cluster_peer_timeout_ms);
}

void answer(self_ptr self, const session_actor& client, uint64_t request, proto::call_status status,
            const std::string& why) {
  self->send(client, frame_atom::value, proto::encode(proto::call_error(request, status, why)));
}

void set_state(self_ptr self, size_t i, link state, std::string error) {
  auto& p = self->state.peers[i];
  if (p.state != state) p.since_ms = static_cast<int64_t>(proto::unix_ms());
  p.state = state;
  p.error = std::move(error);
}

/// Peer `i` is up: the messages held for it go now.
void send_held(self_ptr self, size_t i) {
  auto& p = self->state.peers[i];
  if (p.held.empty()) return;
  spdlog::info("cluster sent messages held while the peer was not up node={} messages={}",
               p.node.name, p.held.size());
  for (auto& m : p.held.take()) {
    p.messages_forwarded++;
    self->send(p.handle, std::move(m));
  }
}

/// Tells the directory what this node withholds now, if that changed.
void publish_withheld(self_ptr self) {
  auto& st = self->state;
  if (auto w = st.agreement.to_tell()) self->send(st.directory, std::move(*w));
}

/// `ended`: hearing a peer ended the start's hold, so the shards held back may be leased now.
void after_hearing(self_ptr self, bool ended) {
  if (!ended) return;
  auto& st = self->state;
  spdlog::info("cluster heard every peer since start; {} ms={}",
               st.agreement.shadowed_now()
                   ? "but a peer is linked to another process as this node: none of its shards "
                     "is leased while one is"
                   : "leasing this node's shards",
               std::chrono::duration_cast<ms>(self->clock().now() - st.started).count());
  publish_withheld(self);
}

/// Peer `i` is linked to another process as this node (`yes`), or took this one: logged and
/// told to the directory when that changes what is withheld (map_agreement::shadowed).
void shadowed_by(self_ptr self, size_t i, bool yes, const std::string& why) {
  auto& st = self->state;
  auto& p = st.peers[i];
  if (!st.agreement.shadowed(p.node.name, yes)) return;
  if (yes)
    spdlog::error("cluster peer is linked to another process as this node node={} reason={}",
                  p.node.name, logging::quoted(why));
  else
    spdlog::info("cluster peer took this process as node {} node={}", st.cfg.cluster_node,
                 p.node.name);
  publish_withheld(self);
}

/// While linked to peer `i`, this node introduces itself again every peer timeout: a peer that
/// took it for a node while that node was down, and is linked to the node again, says so now.
void schedule_rehello(self_ptr self, size_t i) {
  auto& st = self->state;
  self->delayed_send(self, peer_timeout(st), rehello_atom::value, static_cast<uint32_t>(i),
                     st.peers[i].generation);
}

/// Peer `i` was heard: up, refused, or refusing this node.
void heard(self_ptr self, size_t i) {
  after_hearing(self, self->state.agreement.heard(i));
}

/// A dial of peer `i` failed; `reached`: after its port answered (map_agreement::dial_failed).
void dial_failed(self_ptr self, size_t i, bool reached) {
  after_hearing(self, self->state.agreement.dial_failed(i, reached, self->clock().now()));
}

/// Node `name` serves the map `canonical` (digest `digest`; "": worked out here), not ours: the
/// shards ours gives this node and its gives another are withheld while it does. Logged when that
/// changes.
void contested_by(self_ptr self, const std::string& name, const std::string& digest,
                  const std::string& canonical) {
  auto& st = self->state;
  auto out = st.agreement.contested_by(name, digest, canonical);
  if (out.what == map_agreement::change::none) return;
  if (out.what == map_agreement::change::cleared)
    spdlog::info("cluster shards no longer withheld: node {}'s map gives none of them to another "
                 "node shards={}",
                 name, logging::quoted(proto::format_shard_ranges(out.given_back)));
  if (out.what == map_agreement::change::withheld) {
    auto& c = st.agreement.contests().at(name);
    spdlog::error(
        "cluster shards withheld: node {}'s map gives them to another node shards={} "
        "digest={}{}",
        name, logging::quoted(proto::format_shard_ranges(c.shards)), c.digest.substr(0, 12),
        out.unreadable.empty()
            ? ""
            : " reason=" + logging::quoted("its map could not be read: " + out.unreadable));
  }
  publish_withheld(self);
}

/// Node `name` serves this node's map (again): what its other map withheld is given back.
void agreed_with(self_ptr self, const std::string& name) {
  auto shards = self->state.agreement.agreed_with(name);
  if (!shards) return;
  spdlog::info("cluster shards no longer withheld: node {} serves this node's map shards={}", name,
               logging::quoted(proto::format_shard_ranges(*shards)));
  publish_withheld(self);
}

/// How long one dial step (probe, middleman connect, handshake) may take: the peer timeout, at
/// most 5 s (a pending request timeout keeps the actor alive at shutdown).
ms dial_timeout(const cluster_state& st) {
  return std::min<ms>(peer_timeout(st), ms(5000));
}

/// True if the message being handled came from another node (not from this node's directory).
bool from_peer(self_ptr self) {
  auto& sender = self->current_sender();
  return sender && sender->node() != self->node();
}

void schedule_dial(self_ptr self, size_t i) {
  auto& p = self->state.peers[i];
  auto gen = ++p.generation;
  self->delayed_send(self, p.backoff, dial_atom::value, static_cast<uint32_t>(i), gen);
  p.backoff = std::min<ms>(p.backoff * 2, std::min<ms>(ms(2000), peer_timeout(self->state)));
}

/// The link to peer `i` is not up (a failed dial, a lost link): calls in flight to it may have
/// run; dial again after the backoff. Its port not answering counts as heard at once; dials that
/// reached its port and failed later (a handshake that timed out, another version) only once the
/// peer timeout has passed since the first of them: so at least one more dial may find its map.
void lost(self_ptr self, size_t i, const std::string& why) {
  auto& st = self->state;
  auto& p = st.peers[i];
  bool was_up = p.state == link::up;
  if (was_up)
    spdlog::warn("cluster peer down node={} cluster={} reason={}", p.node.name, p.node.cluster,
                 logging::quoted(why));
  else
    spdlog::debug("cluster peer not reached node={} cluster={} reason={}", p.node.name,
                  p.node.cluster, logging::quoted(why));
  set_state(self, i, link::down, why);
  // A peer that cannot be reached vouches for nobody: a shadow it cast ends with the link (this
  // node may be the one that restarted, and the others took it).
  shadowed_by(self, i, false, "");
  bool reached = p.answered;
  p.answered = false;
  p.dialing = false;
  if (p.handle) self->demonitor(p.handle.address());
  p.handle = cluster_actor{};
  p.inspector = nullptr;
  for (auto it = st.waiting.begin(); it != st.waiting.end();) {
    if (it->second.peer != i) {
      ++it;
      continue;
    }
    answer(self, it->second.client, it->second.request, proto::call_status::holder_lost,
           st.owners.describe(i) + " went down with the call in flight (" + why +
               "); it may have run");
    it = st.waiting.erase(it);
  }
  schedule_dial(self, i);
  dial_failed(self, i, reached);
}

/// The lines of node `we`'s map `ours` that node `they`'s map `theirs` lacks and the other way
/// round, for the log (named by node: the text is logged on both sides).
std::string map_difference(const std::string& we, const std::string& ours, const std::string& they,
                           const std::string& theirs) {
  auto lines = [](const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
      out.push_back(l);
    return out;
  };
  auto a = lines(ours), b = lines(theirs);
  std::string diff;
  for (auto& l : a)
    if (std::find(b.begin(), b.end(), l) == b.end()) diff += " node " + we + ": \"" + l + "\";";
  for (auto& l : b)
    if (std::find(a.begin(), a.end(), l) == a.end()) diff += " node " + they + ": \"" + l + "\";";
  return diff.empty() ? " (same lines, different order)" : diff;
}

/// Refused by peer `i` (its map differs, or it is not the node the map says): logged once per
/// reason; dialled again every 2 s until an operator fixes a map.
void refused(self_ptr self, size_t i, const std::string& why) {
  auto& p = self->state.peers[i];
  set_state(self, i, link::refused, why);
  p.dialing = false;
  if (p.refusal_logged != why)
    spdlog::error("cluster peer refused this node node={} reason={}", p.node.name,
                  logging::quoted(why));
  p.refusal_logged = why;
  p.backoff = ms(2000);
  schedule_dial(self, i);
  heard(self, i);
}

/// How this node introduces itself to a peer: its name and map.
peer_hello hello_of(const cluster_state& st) {
  return peer_hello{st.cfg.cluster_node, st.digest, st.canonical};
}

/// The handshake on a connected link: our map's digest against theirs.
void handshake(self_ptr self, size_t i, uint64_t gen, cluster_actor h) {
  auto& st = self->state;
  self->request(h, dial_timeout(st), hello_of(st))
      .then(
          [=](peer_welcome& w) {
            auto& st = self->state;
            auto& p = st.peers[i];
            if (p.generation != gen) return;
            if (!w.canonical.empty())  // its map differs: ours gives it, its own answer says
              contested_by(self, p.node.name, "", w.canonical);
            shadowed_by(self, i, w.shadowed, w.refusal);
            if (!w.refusal.empty()) return refused(self, i, w.refusal);
            if (w.node != p.node.name)  // two map entries name one node, or an address is wrong
              return refused(self, i,
                             "the node at " + p.node.cluster + " is \"" + w.node + "\", not \"" +
                                 p.node.name + "\": the map's addresses are wrong");
            p.handle = h;
            p.inspector = std::move(w.inspector);
            p.backoff = ms(100);
            p.refused_digest.clear();
            p.refusal_logged.clear();
            p.dialing = false;
            set_state(self, i, link::up, "");
            self->monitor(h);
            spdlog::info("cluster peer up node={} cluster={}", p.node.name, p.node.cluster);
            agreed_with(self, p.node.name);
            heard(self, i);
            schedule_rehello(self, i);
            send_held(self, i);
          },
          [=](caf::error& e) {
            if (self->state.peers[i].generation == gen) lost(self, i, self->system().render(e));
          });
}

/// The middleman's connect (on its own thread, one connect at a time for every peer: it runs
/// only after a probe found the peer's port answering, so an unreachable host never holds it).
void connect(self_ptr self, size_t i, uint64_t gen) {
  auto& st = self->state;
  auto at = client::parse_host_port(st.peers[i].dial);
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, dial_timeout(st), caf::connect_atom::value, at->host, at->port)
      .then(
          [=](const caf::node_id& nid, caf::strong_actor_ptr& ptr,
              const std::set<std::string>& ifs) {
            auto& st = self->state;
            auto& p = st.peers[i];
            if (p.generation != gen) return;
            if (!ptr) return lost(self, i, "nothing is published at " + p.node.cluster);
            if (nid == self->node())
              return refused(self, i,
                             "the address " + p.node.cluster + " of node " + p.node.name +
                                 " is this node's own: the map's addresses are wrong");
            if (!self->system().assignable<cluster_actor>(ifs))
              return lost(self, i,
                          "the actor at " + p.node.cluster +
                              " is not a fusee cluster node speaking this version");
            handshake(self, i, gen, caf::actor_cast<cluster_actor>(ptr));
          },
          [=](caf::error& e) {
            if (self->state.peers[i].generation == gen) lost(self, i, self->system().render(e));
          });
}

/// A TCP connect to host:port within `timeout`: "" if it was accepted, else why not. Blocking:
/// runs on a probe actor's own thread.
std::string probe_tcp(const std::string& host, uint16_t port, ms timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    return "cannot resolve " + host + ": " + ::gai_strerror(rc);
  std::string why = "no address for " + host;
  bool ok = false;
  for (auto* a = res; a != nullptr && !ok; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno != EINPROGRESS) {
      why = std::strerror(errno);
    } else {
      pollfd pfd{fd, POLLOUT, 0};
      int n = ::poll(&pfd, 1, static_cast<int>(timeout.count()));
      int err = 0;
      socklen_t len = sizeof(err);
      if (n == 0)
        why = "no answer within " + std::to_string(timeout.count()) + " ms";
      else if (n < 0 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        why = std::strerror(errno);
      else if (err != 0)
        why = std::strerror(err);
      else
        ok = true;
    }
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return ok ? std::string{} : "cannot connect to " + host + ":" + std::to_string(port) + ": " + why;
}

/// The probe of peer `i` on a thread of its own; its answer goes to the cluster actor `to`. (The
/// values are spawn arguments, not captures: CAF 0.17 dereferences a null argument tuple for a
/// function without arguments, which UBSan reports.)
void probe_actor(caf::blocking_actor* b, cluster_actor to, uint32_t i, std::string host,
                 uint16_t port, int64_t timeout_ms) {
  b->send(to, probe_atom::value, i, probe_tcp(host, port, ms(timeout_ms)));
}

/// Dials peer `i`: a probe on a thread of its own (an unreachable host costs that thread up to
/// the dial timeout, never a scheduler thread or the middleman's), then connect and handshake.
void dial(self_ptr self, size_t i) {
  auto& st = self->state;
  auto& p = st.peers[i];
  if (p.dialing) return;  // the dial under way goes on with the current generation
  p.dialing = true;
  p.answered = false;
  auto at = client::parse_host_port(p.node.cluster);
  auto me = caf::actor_cast<cluster_actor>(caf::actor_cast<caf::strong_actor_ptr>(self));
  self->system().spawn<caf::detached + caf::hidden>(probe_actor, me, static_cast<uint32_t>(i),
                                                    at->host, at->port,
                                                    static_cast<int64_t>(dial_timeout(st).count()));
}

/// A CALL_RESULT for a forwarded call: to the client, under the client's own request id.
void take_frame(self_ptr self, const proto::bytes& frame) {
  auto r = call_result_in(frame);
  if (!r) return;
  auto it = self->state.waiting.find(r->id);
  if (it == self->state.waiting.end()) return;  // answered already (its node went down)
  r->id = it->second.request;
  self->send(it->second.client, frame_atom::value, proto::encode(*r));
  self->state.waiting.erase(it);
}

/// A CALL for another node's shard: to that node, or failed at once while it is not up.
void forward_call(self_ptr self, size_t owner, call_request&& c) {
  auto& st = self->state;
  auto& p = st.peers[owner];
  if (p.state != link::up) {
    p.calls_failed_fast++;
    auto why = p.state == link::refused
                   ? "it refuses this node (" + p.error + ")"
                   : std::string{"it is "} + link_name(p.state) + " (" + p.error + ")";
    answer(self, c.from.reply_to, c.from.request, proto::call_status::parked_too_long,
           "shard " + std::to_string(c.from.shard) + " is served by " + st.owners.describe(owner) +
               ", which cannot be reached: " + why + "; the call did not run");
    return;
  }
  p.calls_forwarded++;
  uint64_t ticket = st.next_ticket++;
  // A forwarded call waits as a local one does: for its answer, or for the owner's link to be
  // lost (then "may have run"). The deadline is only a safety net for an answer lost on a link
  // that stayed up; it is longer than any wait the owner may grant (a `result` call with
  // wait_ms: the runtime caps it at 10 minutes; a parked call: park_ms).
  uint32_t park = st.cfg.park_for(c.park_ms);
  st.waiting[ticket] = forwarded_call{c.from.reply_to, c.from.request, owner,
                                      self->clock().now() + ms(park) + std::chrono::minutes(15)};
  if (!st.ticking) {
    st.ticking = true;
    self->delayed_send(self, ms(1000), tick_atom::value);
  }
  c.from =
      origin{st.id, caf::actor_cast<session_actor>(caf::actor_cast<caf::strong_actor_ptr>(self)),
             ticket, c.from.shard, 0};
  self->send(p.handle, std::move(c));
}

actor_stats stats_of(self_ptr self) {
  auto& st = self->state;
  actor_stats a{"cluster", 0};
  a.mailbox = self->mailbox().size();
  size_t up = 0;
  for (size_t i = 0; i < st.peers.size(); ++i)
    if (i != st.owners.self() && st.peers[i].state == link::up) up++;
  a.state = up + 1 == st.peers.size() ? "ok" : "degraded";
  a.text("node", st.cfg.cluster_node);
  a.text("digest", st.digest);
  a.num("nodes", st.peers.size());
  a.num("peersUp", up);
  a.num("callsWaiting", st.waiting.size());
  a.num("callsFromNodes", st.calls_in);
  a.num("messagesFromNodes", st.messages_in);
  uint64_t fwd = 0, fast = 0, msgs = 0, dropped = 0, held = 0;
  for (auto& p : st.peers) {
    fwd += p.calls_forwarded;
    fast += p.calls_failed_fast;
    msgs += p.messages_forwarded;
    dropped += p.messages_dropped;
    held += p.held.size();
  }
  a.num("callsForwarded", fwd);
  a.num("callsFailedFast", fast);
  a.num("messagesForwarded", msgs);
  a.num("messagesHeld", held);
  a.num("messagesDropped", dropped);
  a.num("heardEveryPeer", st.agreement.settled());
  std::string withheld;  // "3-4 (node c's map)"
  if (st.agreement.shadowed_now())
    withheld = "all (a peer is linked to another process as this node)";
  for (auto& [name, c] : st.agreement.contests())
    withheld += (withheld.empty() ? "" : "; ") + proto::format_shard_ranges(c.shards) + " (node " +
                name + "'s map)";
  a.text("withheld", withheld);
  return a;
}

cluster_actor::behavior_type cluster_fn(self_ptr self, node_settings cfg, directory_actor directory,
                                        std::map<std::string, std::string> dial_via) {
  auto& st = self->state;
  st.cfg = std::move(cfg);
  st.owners = shard_owners(st.cfg);
  st.directory = std::move(directory);
  st.digest = st.cfg.cluster.digest();
  st.canonical = st.cfg.cluster.canonical();
  st.id = new_session_id();
  st.started = self->clock().now();
  st.agreement = map_agreement(st.cfg);  // the directory starts told its start's hold
  st.peers.resize(st.cfg.cluster.nodes.size());
  for (size_t i = 0; i < st.peers.size(); ++i) {
    st.peers[i].node = st.cfg.cluster.nodes[i];
    auto via = dial_via.find(st.peers[i].node.name);
    st.peers[i].dial = via != dial_via.end() ? via->second : st.peers[i].node.cluster;
  }
  auto now = static_cast<int64_t>(proto::unix_ms());
  for (size_t i = 0; i < st.peers.size(); ++i) {
    st.peers[i].since_ms = now;
    if (i == st.owners.self()) {
      st.peers[i].state = link::self;
      st.peers[i].error.clear();
    }
  }
  self->set_down_handler([=](caf::down_msg& m) {
    auto& st = self->state;
    for (size_t i = 0; i < st.peers.size(); ++i)
      if (st.peers[i].handle && st.peers[i].handle.address() == m.source)
        lost(self, i,
             m.reason == caf::exit_reason::remote_link_unreachable
                 ? "link lost: the connection closed, or the node was silent for "
                   "cluster.peer_timeout_ms (" +
                       std::to_string(st.cfg.cluster_peer_timeout_ms) + " ms)"
                 : "link lost: " + self->system().render(m.reason));
  });
  return {
      [=](frame_atom, proto::bytes& frame) { take_frame(self, frame); },
      [=](close_atom, proto::bytes& frame) { take_frame(self, frame); },
      [=](overflow_atom) {},
      [=](call_request& c) {
        auto& st = self->state;
        auto owner = st.owners.owner_index(c.from.shard);
        if (owner && *owner != st.owners.self()) {
          if (from_peer(self))  // never forwarded twice: the maps would disagree (a loop)
            return answer(self, c.from.reply_to, c.from.request, proto::call_status::bad_request,
                          "node " + st.cfg.cluster_node + " got a call for shard " +
                              std::to_string(c.from.shard) + ", which its map gives to " +
                              st.owners.describe(*owner) + ": the nodes' maps disagree");
          return forward_call(self, *owner, std::move(c));
        }
        st.calls_in++;  // a peer's call for one of this node's shards
        self->send(st.directory, std::move(c));
      },
      [=](remote_message& m) {
        auto& st = self->state;
        auto owner = st.owners.owner_index(m.target);
        if (!owner || *owner == st.owners.self()) {
          st.messages_in++;
          self->send(st.directory, std::move(m));
          return;
        }
        auto& p = st.peers[*owner];
        if (from_peer(self)) {   // never forwarded twice: the maps would disagree (a loop)
          p.messages_dropped++;  // the sender resends it until it is acknowledged
          return;
        }
        if (p.state != link::up) {  // sent once it is; past the bounds left to the sender
          if (!p.held.hold(std::move(m))) p.messages_dropped++;
          return;
        }
        p.messages_forwarded++;
        self->send(p.handle, std::move(m));
      },
      [=](remote_ack& a) {
        auto& st = self->state;
        auto owner = st.owners.owner_index(a.sender);
        if (!owner || *owner == st.owners.self()) {
          self->send(st.directory, a);
          return;
        }
        if (st.peers[*owner].state == link::up && !from_peer(self))
          self->send(st.peers[*owner].handle, a);
      },
      [=](peer_hello& h) -> peer_welcome {
        auto& st = self->state;
        peer_welcome w;
        w.node = st.cfg.cluster_node;
        auto i = st.owners.index_of(h.node);
        auto* p = i && *i != st.owners.self() ? &st.peers[*i] : nullptr;
        // Linked to node h.node at its map address, and this is another process calling itself
        // that: not taken for it, and the link stays (a restarted node's old link ends within
        // the peer timeout; its next dial is taken then).
        auto& sender = self->current_sender();
        if (p != nullptr && p->state == link::up && sender && p->handle &&
            sender->node() != p->handle.node()) {
          w.refusal = "node " + st.cfg.cluster_node + " is linked to node " + h.node + " at " +
                      p->node.cluster +
                      ", which is another process: a second process calling "
                      "itself " +
                      h.node + " is not taken for it (two processes configured as node " + h.node +
                      "? a node that restarted is taken once its old link ends)";
          w.shadowed = true;
          if (auto who = caf::to_string(sender->node()); p->shadow_logged != who) {
            spdlog::error("cluster peer refused: another process calls itself node={} reason={}",
                          h.node, logging::quoted(w.refusal));
            p->shadow_logged = who;
          }
          return w;
        }
        if (h.digest != st.digest) {
          w.refusal = "node " + st.cfg.cluster_node + " serves a different cluster map (digest " +
                      st.digest.substr(0, 12) + ", node " + h.node + " has " +
                      h.digest.substr(0, 12) +
                      "):" + map_difference(st.cfg.cluster_node, st.canonical, h.node, h.canonical);
          if (p == nullptr || p->refused_digest != h.digest)
            spdlog::error("cluster peer refused: its map differs node={} reason={}", h.node,
                          logging::quoted(w.refusal));
          w.canonical = st.canonical;
          if (p != nullptr) {
            p->refused_digest = h.digest;
            if (p->state == link::up) lost(self, *i, "it now serves another map");
          }
          contested_by(self, h.node, h.digest, h.canonical);
          if (p != nullptr) heard(self, *i);
          return w;
        }
        agreed_with(self, h.node);
        w.inspector = st.inspector;
        if (p == nullptr) return w;
        // A peer that dials in is back: dial it now rather than at the end of a backoff.
        if (p->state != link::up && !p->dialing) {
          p->backoff = ms(100);
          ++p->generation;
          dial(self, *i);
        }
        return w;
      },
      [=](members_atom) {
        auto& st = self->state;
        std::vector<cluster_member> out;
        for (size_t i = 0; i < st.peers.size(); ++i) {
          auto& p = st.peers[i];
          cluster_member m;
          m.name = p.node.name;
          m.cluster = p.node.cluster;
          m.listen = p.node.listen;
          m.http = p.node.http;
          m.shards = proto::format_shard_ranges(p.node.shards);
          m.state = link_name(p.state);
          m.error = p.error;
          m.since_ms = p.since_ms;
          m.calls_forwarded = p.calls_forwarded;
          m.calls_failed_fast = p.calls_failed_fast;
          m.messages_forwarded = p.messages_forwarded;
          m.inspector = i == st.owners.self() ? st.inspector : p.inspector;
          out.push_back(std::move(m));
        }
        return out;
      },
      [=](caf::put_atom, caf::strong_actor_ptr& inspector) {
        if (!from_peer(self)) self->state.inspector = std::move(inspector);  // this node only
      },
      [=](dial_atom) {  // published now: dial every peer (once)
        auto& st = self->state;
        if (from_peer(self) || st.dialled) return;
        st.dialled = true;
        st.started = self->clock().now();
        for (size_t i = 0; i < st.peers.size(); ++i)
          if (i != st.owners.self() && !st.peers[i].dialing) {
            ++st.peers[i].generation;
            dial(self, i);
          }
      },
      [=](rehello_atom, uint32_t i, uint64_t gen) {
        auto& st = self->state;
        if (from_peer(self) || i >= st.peers.size()) return;
        auto& p = st.peers[i];
        if (p.generation != gen || p.state != link::up) return;
        self->request(p.handle, dial_timeout(st), hello_of(st))
            .then(
                [=](peer_welcome& w) {
                  auto& p = self->state.peers[i];
                  if (p.generation != gen || p.state != link::up) return;
                  shadowed_by(self, i, w.shadowed, w.refusal);
                  schedule_rehello(self, i);
                },
                [=](caf::error&) {
                  // The link's monitor and the middleman's timeout end it if it is gone; else
                  // the next turn asks again.
                  if (self->state.peers[i].generation == gen) schedule_rehello(self, i);
                });
      },
      [=](probe_atom, uint32_t i, std::string& failed) {
        auto& st = self->state;
        if (from_peer(self) || i >= st.peers.size()) return;
        auto& p = st.peers[i];
        if (p.state == link::up) return;
        if (!failed.empty()) return lost(self, i, failed);
        p.answered = true;
        connect(self, i, p.generation);
      },
      [=](dial_atom, uint32_t i, uint64_t generation) {
        auto& st = self->state;
        if (i < st.peers.size() && st.peers[i].generation == generation &&
            st.peers[i].state != link::up && !from_peer(self))
          dial(self, i);
      },
      [=](tick_atom) {
        auto& st = self->state;
        auto now = self->clock().now();
        for (auto it = st.waiting.begin(); it != st.waiting.end();) {
          if (it->second.deadline > now) {
            ++it;
            continue;
          }
          answer(self, it->second.client, it->second.request, proto::call_status::holder_lost,
                 st.owners.describe(it->second.peer) + " did not answer the call in time; it may "
                                                       "have run");
          it = st.waiting.erase(it);
        }
        st.ticking = !st.waiting.empty();
        if (st.ticking) self->delayed_send(self, ms(1000), tick_atom::value);
      },
      [=](stats_atom) { return stats_of(self); },
  };
}

}  // namespace

cluster_actor spawn_cluster(caf::actor_system& sys, const node_settings& cfg,
                            directory_actor directory,
                            std::map<std::string, std::string> dial_via) {
  return sys.spawn(cluster_fn, cfg, std::move(directory), std::move(dial_via));
}

}  // namespace fusee::server
