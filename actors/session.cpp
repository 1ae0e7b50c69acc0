#include "actors/session.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "actors/directory_interface.hpp"
#include "actors/liveness_rules.hpp"
#include "actors/log_sink.hpp"
#include "actors/net/connection.hpp"
#include "actors/net/connection_limits.hpp"
#include "actors/net/io_loop.hpp"
#include "actors/net/out_lane.hpp"
#include "actors/token_store.hpp"
#include "actors/wal/wal_writer.hpp"
#include "logging/logging.hpp"
#include "protocol/auth.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

namespace {

using proto::bytes;
using ms = std::chrono::milliseconds;

std::string peer_name(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  char host[NI_MAXHOST], port[NI_MAXSERV];
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
      ::getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof(host), port, sizeof(port),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "unknown peer";
  return std::string(host) + ":" + port;
}

enum class role { none, worker, client };

/// Where a connection is in proving a token (docs/protocol.md, "Extension: tokens").
enum class auth_phase {
  open,        ///< the node has no tokens: everything is allowed
  needed,      ///< the first frame must be AUTH
  challenged,  ///< AUTH_CHALLENGE sent; the next frame must be AUTH_PROOF
  proven,      ///< `scope` says what it may do
};

/// The session actor's whole interface: what the directory and the log's sink may send it
/// (session_actor), what the I/O threads hand it, its liveness tick and its deadline check.
using session_conn_actor = session_actor::extend<caf::reacts_to<inbound>, caf::reacts_to<tick_atom>,
                                                 caf::reacts_to<deadline_atom>>;
static_assert(std::is_convertible_v<session_conn_actor, session_actor>,
              "the session implements what the directory and the log's sink send it");

/// A set of request types, asked by type (decoded) or by frame kind (not yet decoded).
template <class... Ts>
struct request_set {
  template <class T>
  static constexpr bool has = (std::is_same_v<T, Ts> || ...);
  static bool has_kind(uint8_t kind) { return ((kind == static_cast<uint8_t>(Ts::tag)) || ...); }
};
/// The requests the log answers.
using log_requests =
    request_set<proto::append, proto::recover_log, proto::checkpoint, proto::load_checkpoint>;

/// The largest frame body a connection may send before it has proven a token (AUTH and AUTH_PROOF
/// are a few dozen bytes): a peer that proved nothing makes the server buffer no more than this.
constexpr uint32_t unproven_frame_limit = 64 << 10;

/// The socket as its I/O thread and its session actor share it. What the actor decides (HELLO
/// said, requests the I/O threads may serve) is published in atomics the I/O threads read.
class session_conn final : public connection {
public:
  session_conn(int fd, const session_context& ctx, std::string ip, int spare)
      : connection(fd, ctx.settings->write_buffer_mb << 20,
                   // the frame limit in bytes, never above the protocol's (max_frame_mb <= 96)
                   std::min<uint32_t>(ctx.settings->max_frame_mb << 20, proto::max_body_size),
                   spare),
        id(new_session_id()), cfg(ctx.settings), wal(ctx.wal), owners(ctx.owners),
        limits(ctx.limits), directory(ctx.directory), peer_ip(std::move(ip)), started_ns(now_ns()),
        proven_frame_limit(frame_limit.load()) {
    if (ctx.tokens && ctx.tokens->required())
      frame_limit.store(std::min(proven_frame_limit, unproven_frame_limit));
  }

  const session_id id;
  const std::shared_ptr<const node_settings> cfg;
  wal_writer* const wal;
  const std::shared_ptr<const shard_owners> owners;
  const std::shared_ptr<connection_limits> limits;
  const directory_actor directory;
  const std::string peer_ip;  ///< what `limits` counts this connection under
  const int64_t started_ns;
  const uint32_t proven_frame_limit;  ///< limits.max_frame_mb, once a token is proven
  /// APPENDs submitted to the log's queue and not taken by its writer yet (the writer decrements
  /// it): with the batch being written, at most twice limits.max_appends_in_flight are pending.
  const std::shared_ptr<std::atomic<uint32_t>> appends_in_flight =
      std::make_shared<std::atomic<uint32_t>>(0);
  session_conn_actor actor;  ///< set before the loop serves the connection

  /// Set by the actor: HELLO or CLIENT_HELLO handled (the handshake deadline is over).
  std::atomic<bool> greeted{false};
  /// Set by the actor: the I/O threads hand this connection's log requests to the log and answer
  /// its PINGs themselves (it said HELLO and may send them); cleared when it closes.
  std::atomic<bool> direct{false};
  /// Log requests handed to the actor and not yet to the log: while any are, the I/O threads
  /// hand the next ones to the actor too, so the log sees them in stream order.
  std::atomic<uint32_t> log_requests_at_actor{0};
  /// Set by the actor once HELLO or CLIENT_HELLO is handled: the I/O threads hand this
  /// connection's CALLs and CALL_REPLYs to the directory themselves, if their scope is at most this
  /// (proto::scope as a number; -1: the actor takes them); back to -1 when it closes.
  std::atomic<int> calls_scope{-1};
  /// Frames handed to the actor and not handled yet: while any are, the I/O threads hand CALLs
  /// and CALL_REPLYs to it too, so the directory sees the connection's requests in stream order.
  std::atomic<uint32_t> frames_at_actor{0};
  /// A deadline_atom is on its way (the I/O thread's sweep sent it).
  std::atomic<bool> deadline_told{false};

  /// Sends `m` in the connection's order; a lane over its limit ends the session.
  void send(const proto::any_message& m) {
    if (lane()->send(proto::encode(m)) == out_lane::outcome::over_limit)
      caf::anon_send(actor, overflow_atom::value);
  }

  void on_frames(std::vector<proto::frame>& frames) override;
  void on_bad_stream(proto::error e) override {
    caf::anon_send(actor,
                   inbound{{}, 0, static_cast<uint16_t>(e.code), std::move(e.message), false});
  }
  void on_closed(int read_error) override {
    caf::anon_send(actor, inbound{{}, 0, 0, {}, true, read_error});
  }
  void on_sweep(std::chrono::steady_clock::time_point now) override;

private:
  bool to_directory(const proto::frame& f);
  bool slow_only_ = false;  ///< a request the I/O thread took did not decode: the actor closes
};

/// Queues `e` for the log: from an I/O thread (`from_io`) for the commit that ends its turn,
/// from the actor with the writer thread woken.
void submit_to_log(session_conn& c, wal_entry e, bool from_io) {
  if (from_io)
    c.wal->enqueue(std::move(e));
  else
    c.wal->submit(std::move(e));
}

/// False (and the ERR sent) if `h` names another node's shard: its holder can only be there.
bool local_shard(session_conn& c, const proto::request_head& h) {
  if (h.shard == proto::no_shard) return true;
  auto foreign = c.owners->refuse_foreign(h.shard.value());
  if (foreign) c.send(proto::make_err(h.id, *foreign));
  return !foreign;
}

/// An APPEND, from either decoding (to_log's, or the I/O thread's views into the frame).
void append_to_log(session_conn& c, const proto::request_head& h, proto::lsn_t first_lsn,
                   append_records records, bool from_io) {
  if (!local_shard(c, h)) return;
  auto waiting = c.appends_in_flight->load(std::memory_order_acquire);
  if (waiting >= c.cfg->max_appends_in_flight) {  // refused, not closed: wait, resend
    if (c.limits) c.limits->count(connection_limits::limit::appends_in_flight);
    c.send(proto::make_err(h.id, proto::error{proto::err_code::too_large,
                                              std::to_string(waiting) +
                                                  " APPENDs on this connection wait for the log "
                                                  "(limits.max_appends_in_flight): wait for "
                                                  "DURABLE before sending more"}));
    return;
  }
  c.appends_in_flight->fetch_add(1, std::memory_order_relaxed);
  submit_to_log(
      c,
      wal_append{c.id, h.id, h.shard, h.epoch, first_lsn, std::move(records), c.appends_in_flight},
      from_io);
}

/// The log's requests: here (and in append_to_log, where APPENDs go) they are checked and handed
/// to the log. Refusals go straight to the lane. The actor's APPENDs are packed into one buffer
/// (a copy the I/O thread's views into the frame do not need).
void to_log(session_conn& c, proto::any_message&& msg, bool from_io) {
  auto submit = [&](wal_entry e) { submit_to_log(c, std::move(e), from_io); };
  std::visit(
      [&](auto&& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, proto::append>) {
          append_to_log(c, m.head, m.first_lsn, append_records::pack(m.records), from_io);
        } else if constexpr (log_requests::has<T>) {
          auto& h = m.head;
          if (!local_shard(c, h)) return;
          if constexpr (std::is_same_v<T, proto::recover_log>) {
            submit(wal_read{c.id, h.id, h.shard, h.epoch, m.after_lsn, m.max_bytes});
          } else if constexpr (std::is_same_v<T, proto::checkpoint>) {
            submit(wal_checkpoint{c.id, h.id, h.shard, h.epoch, m.lsn, std::move(m.data)});
          } else {
            submit(wal_load_checkpoint{c.id, h.id, h.shard, h.epoch});
          }
        }
      },
      std::move(msg));
}

/// Where a request came from, for the directory: session `s`, answered through `a`.
origin origin_at(session_id s, session_actor a, const proto::request_head& h) {
  return origin{s, std::move(a), h.id, h.shard.value(), h.epoch.value()};
}

/// What the directory is asked for a CALL and for a CALL_REPLY (by the I/O thread or the actor).
call_request request_of(origin from, proto::call&& m) {
  return call_request{std::move(from), std::move(m.method), std::move(m.type), std::move(m.args),
                      m.park_ms};
}
call_reply_request request_of(origin from, proto::call_reply&& m) {
  return call_reply_request{std::move(from), m.relay, m.ok != 0, std::move(m.body)};
}

/// A CALL or CALL_REPLY handed from the I/O thread to the directory, as the actor would (one
/// hop less for a call's way to the workflow and its answer's way back). False: the actor takes
/// the frame, and with it whatever it must refuse (a frame that does not decode, a scope too
/// small, another node's shard) with its reasons.
bool session_conn::to_directory(const proto::frame& f) {
  // The count first: once the actor has handled every frame before this one, its scope (or the
  // -1 of a session it ended on one of them) is what the next load sees.
  if (slow_only_ || frames_at_actor.load(std::memory_order_acquire) != 0) return false;
  int scope = calls_scope.load(std::memory_order_acquire);
  if (scope < 0) return false;
  auto m = proto::decode_request(f.kind, f.body);
  if (!m || static_cast<int>(proto::scope_needed(*m)) > scope) return false;
  auto from = [&](const proto::request_head& h) {
    return origin_at(id, caf::actor_cast<session_actor>(actor), h);
  };
  if (auto* c = std::get_if<proto::call>(&*m)) {
    caf::anon_send(directory, request_of(from(c->head), std::move(*c)));
    return true;
  }
  auto* r = std::get_if<proto::call_reply>(&*m);
  if (!r || (r->head.shard != proto::no_shard && owners->refuse_foreign(r->head.shard.value())))
    return false;
  caf::anon_send(directory, request_of(from(r->head), std::move(*r)));
  return true;
}

void session_conn::on_frames(std::vector<proto::frame>& frames) {
  inbound in;
  bool served_here = direct.load(std::memory_order_acquire) && !slow_only_;
  for (auto& f : frames) {
    bool log_request = log_requests::has_kind(f.kind);
    if ((f.kind == static_cast<uint8_t>(proto::kind::call) ||
         f.kind == static_cast<uint8_t>(proto::kind::call_reply)) &&
        to_directory(f))
      continue;
    if (served_here && (f.kind == static_cast<uint8_t>(proto::kind::ping) ||
                        (log_request && log_requests_at_actor.load() == 0))) {
      if (f.kind == static_cast<uint8_t>(proto::kind::append)) {
        // The hot frame: its records go to the log as views into the frame's body.
        auto v = proto::decode_append_view(f.body);
        if (v) {
          append_to_log(*this, v->head, v->first_lsn,
                        append_records{std::move(f.body), std::move(v->records)}, true);
          continue;
        }
      } else if (auto m = proto::decode_request(f.kind, f.body)) {
        if (auto* p = std::get_if<proto::ping>(&*m))
          send(proto::ok{p->head.id, {}});
        else
          to_log(*this, std::move(*m), true);
        continue;
      }
      slow_only_ = served_here = false;  // the actor answers it (ERR) and closes
    }
    if (log_request) log_requests_at_actor.fetch_add(1);
    frames_at_actor.fetch_add(1);
    in.frames.push_back(std::move(f));
  }
  if (!in.frames.empty()) {
    in.read_at = clock_ns(caf::actor_clock::clock_type::now());
    caf::anon_send(actor, std::move(in));
  }
}

void session_conn::on_sweep(std::chrono::steady_clock::time_point now) {
  if (deadline_told.load()) return;
  auto now_ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
  auto partial = partial_since_ns.load(std::memory_order_relaxed);
  bool due = (!greeted.load() && now_ns - started_ns >= int64_t{cfg->hello_timeout_ms} * 1000000) ||
             (partial != 0 && now_ns - partial >= int64_t{cfg->frame_timeout_ms} * 1000000);
  if (due && !deadline_told.exchange(true)) caf::anon_send(actor, deadline_atom::value);
}

struct session_state {
  std::shared_ptr<session_conn> conn;
  int64_t read_at = 0;  ///< when the frames being handled were read (inbound::read_at)
  /// Liveness counts from here: steady_clock ns by which the LEASE's last byte was in the kernel
  /// (seen then or at the next tick); 0: not yet.
  int64_t lease_sent_ns = 0;
  uint64_t lease_end = 0;  ///< out_lane::taken() once the LEASE is in the kernel; 0: no LEASE yet
  session_id id = 0;
  directory_actor directory;
  log_sink* sink = nullptr;
  std::shared_ptr<token_store> tokens;
  auth_phase auth = auth_phase::open;
  proto::scope scope = proto::scope::worker;
  std::string token_name;  ///< the proven token's name (never its secret)
  proto::bytes client_nonce, server_nonce;
  proto::bytes binding;  ///< what proofs are bound to: empty without TLS
  std::string peer_ip;
  role who = role::none;
  bool closing = false;
  std::string peer;       ///< host:port of the other side
  std::string peer_name;  ///< the name its HELLO gave
  bool invoked = false;
  static inline const char* name = "session";
};

using session_ptr = session_conn_actor::stateful_pointer<session_state>;

/// Notes when the LEASE has left: its last byte is in the kernel (a LEASE of many shards may
/// wait in the lane while the worker reads it).
void note_lease_out(session_ptr self) {
  auto& st = self->state;
  if (st.lease_sent_ns == 0 && st.lease_end != 0 && st.conn->lane()->taken() >= st.lease_end)
    st.lease_sent_ns = connection::now_ns();
}

/// The silence liveness counts against this worker now (liveness_rules.hpp): up to what the I/O
/// threads have read, loaded first so that a read it covers is seen in last_rx_ns.
int64_t silence_ns(const session_state& st) {
  auto seen = st.conn->seen_through_ns();
  return liveness_silence_ns(seen, st.conn->last_rx_ns.load(std::memory_order_relaxed),
                             st.lease_sent_ns);
}

/// Ends the session once, `why` (for the log). The lane is closed (the peer sees the end, the I/O
/// thread's read ends and the connection leaves its loop). A failed read or write (`failed`, or the
/// lane's failure) is a warning; any other end is logged at debug.
void end_session(session_ptr self, const std::string& why, bool failed = false);

/// What becomes of a worker's leases when its connection ends, for the log: an invoked worker's
/// shards are the invoker's to wake again.
const char* leases_go(const session_state& st) {
  if (st.who != role::worker) return "";
  return st.invoked ? "; its leases end (the invoker wakes the shards again when due)"
                    : "; its leases go to standbys";
}

/// The peer stopped reading: the lane is over limits.write_buffer_mb.
void overflow(session_ptr self) {
  auto& st = self->state;
  if (st.closing) return;
  spdlog::warn("a connection stopped reading: more than {} bytes wait to be written to it "
               "(limits.write_buffer_mb); closing it{} session={} peer={} name={}",
               st.conn->lane()->limit(), leases_go(st), st.id, st.peer,
               logging::quoted(st.peer_name));
  st.conn->lane()->abort();  // drop what waits: the peer does not read it
  end_session(self, "it stopped reading (limits.write_buffer_mb)");
}

/// Sends a frame in the connection's one order (see out_lane.hpp).
void write_bytes(session_ptr self, const bytes& frame) {
  auto& st = self->state;
  if (st.closing) return;
  if (st.conn->lane()->send(frame) == out_lane::outcome::over_limit) overflow(self);
}

void write(session_ptr self, const proto::any_message& m) {
  write_bytes(self, proto::encode(m));
}

void end_session(session_ptr self, const std::string& why, bool failed) {
  auto& st = self->state;
  if (st.closing) return;
  st.closing = true;
  // A write that failed shut the socket down: the read side's end (`why`) follows from it, so
  // the write's failure is the reason.
  std::string reason = why;
  if (int e = st.conn->lane()->failure(); e != 0) {
    failed = true;
    reason = std::string{"writing to it failed: "} + std::strerror(e);
  }
  auto line =
      fmt::format("connection closed: {}{} session={} peer={} name={}", reason,
                  failed ? leases_go(st) : "", st.id, st.peer, logging::quoted(st.peer_name));
  if (failed)  // a peer can cause it at will (reset its connections): limited
    logging::warn_limited("closed " + st.peer_ip + " " + reason, line);
  else
    spdlog::debug("{}", line);
  st.conn->direct.store(false);
  st.conn->calls_scope.store(-1);
  st.conn->lane()->close();
  st.sink->remove_session(st.id);
  if (st.conn->limits) st.conn->limits->release(st.peer_ip);
  if (st.who == role::worker) self->send(st.directory, session_ended{st.id, false});
  self->quit();
}

/// Answers a broken request with ERR and closes the connection (PROTOCOL.md §2).
void refuse_and_close(session_ptr self, uint64_t id, const proto::error& e) {
  write(self, proto::make_err(id, e));
  end_session(self, "refused: " + e.message);
}

/// Refuses a connection that has not proven a token: counted, logged without any secret, closed.
void refuse_unauthenticated(session_ptr self, uint64_t id, const std::string& why) {
  auto& st = self->state;
  st.tokens->count_refusal();
  logging::warn_limited(
      "auth " + st.peer_ip + why,
      fmt::format("refused a connection: {} session={} peer={}", why, st.id, st.peer));
  refuse_and_close(self, id, proto::error{proto::err_code::unauthorized, why});
}

/// The token extension's two requests (AUTH, AUTH_PROOF).
void handle_auth(session_ptr self, proto::any_message& msg) {
  auto& st = self->state;
  // (On a node without tokens on_inbound refused both kinds before decoding them.)
  if (auto* a = std::get_if<proto::auth_hello>(&msg)) {
    if (st.auth != auth_phase::needed) {
      refuse_unauthenticated(self, a->head.id, "a second AUTH on one connection");
      return;
    }
    st.client_nonce = std::move(a->nonce);
    st.server_nonce = proto::fresh_nonce();
    st.auth = auth_phase::challenged;
    write(self, proto::auth_challenge{a->head.id, st.server_nonce});
    return;
  }
  auto& r = std::get<proto::auth_response>(msg);
  if (st.auth != auth_phase::challenged) {
    refuse_unauthenticated(self, r.head.id, "AUTH_PROOF without AUTH before it");
    return;
  }
  auto tokens = st.tokens->tokens();
  auto* t = proto::token_for_proof(*tokens, r.proof, st.client_nonce, st.server_nonce, st.binding);
  if (t == nullptr) {
    refuse_unauthenticated(self, r.head.id,
                           "the token's proof matches none of this server's tokens (a wrong or "
                           "retired token, or a proof made for another connection)");
    return;
  }
  st.auth = auth_phase::proven;
  st.conn->frame_limit.store(st.conn->proven_frame_limit);  // before its AUTH_OK lets it send more
  st.scope = t->scope;
  st.token_name = t->name;
  auto proof = proto::auth_proof(t->secret, proto::auth_side::server, st.client_nonce,
                                 st.server_nonce, st.binding);
  write(self, proto::auth_ok{r.head.id, static_cast<uint8_t>(t->scope), t->name,
                             proto::bytes(proof.begin(), proof.end())});
  spdlog::debug("token proven session={} peer={} token={} scope={}", st.id, st.peer,
                logging::quoted(t->name), proto::scope_name(t->scope));
}

/// A node with tokens, and this connection has not proven one yet.
bool awaits_proof(const session_state& st) {
  return st.auth == auth_phase::needed || st.auth == auth_phase::challenged;
}

/// The highest scope (proto::scope as a number) the connection may use now: all of them on a node
/// without tokens, the proven token's once proven, none (-1) before.
int usable_scope(const session_state& st) {
  if (st.auth == auth_phase::open) return static_cast<int>(proto::scope::worker);
  return st.auth == auth_phase::proven ? static_cast<int>(st.scope) : -1;
}

/// False (and the request answered with ERR UNAUTHORIZED) if the connection may not send it.
/// Why a request of `kind` is refused from a connection that has not proven a token.
std::string unproven_why(uint8_t kind) {
  return "this server requires a token: prove one with AUTH before " + proto::kind_name(kind) +
         " (docs/protocol.md, \"Extension: tokens\"; the fusee CLI and runtime take "
         "--token-file or FUSEE_TOKEN_FILE)";
}

bool allowed(session_ptr self, const proto::any_message& msg) {
  auto& st = self->state;
  if (st.auth == auth_phase::open) return true;
  uint64_t id = std::visit(
      [](const auto& m) -> uint64_t {
        if constexpr (requires { m.head; })
          return m.head.id;
        else
          return m.id;
      },
      msg);
  if (awaits_proof(st)) {  // (on_inbound refuses these before decoding them)
    refuse_unauthenticated(self, id, unproven_why(static_cast<uint8_t>(proto::kind_of(msg))));
    return false;
  }
  auto needed = proto::scope_needed(msg);
  if (needed <= st.scope) return true;
  st.tokens->count_refusal();
  std::string what = proto::kind_name(static_cast<uint8_t>(proto::kind_of(msg)));
  if (auto* c = std::get_if<proto::call>(&msg)) what = "a " + c->method + " CALL";
  auto why = "token \"" + st.token_name + "\" has the " + std::string{proto::scope_name(st.scope)} +
             " scope: " + what + " needs a " + std::string{proto::scope_name(needed)} + " token";
  // (keyed by the kind, not by the method a peer chose: a peer cannot make each line new)
  logging::warn_limited("scope " + st.peer_ip + " " +
                            proto::kind_name(static_cast<uint8_t>(proto::kind_of(msg))),
                        fmt::format("refused a request: {} session={} peer={}",
                                    logging::quoted(why), st.id, st.peer));
  write(self, proto::make_err(id, proto::error{proto::err_code::unauthorized, why}));
  return false;
}

/// An IDLE frame's entries as the directory keeps them.
std::vector<shard_report> reports_of(std::vector<proto::idle_entry>&& entries) {
  std::vector<shard_report> out;
  out.reserve(entries.size());
  for (auto& e : entries) {
    shard_report r;
    r.shard = e.shard.value();
    r.epoch = e.epoch.value();
    r.end.flags = e.flags;
    r.end.due_in_ms = e.due_in_ms;
    r.end.steps = e.steps;
    r.end.open_us = e.open_us;
    r.end.types = std::move(e.types);
    out.push_back(std::move(r));
  }
  return out;
}

/// Where a request came from, for the directory.
origin origin_of(session_ptr self, const proto::request_head& h) {
  return origin_at(self->state.id, caf::actor_cast<session_actor>(self), h);
}

void handle(session_ptr self, proto::any_message&& msg) {
  auto& st = self->state;
  if (std::holds_alternative<proto::auth_hello>(msg) ||
      std::holds_alternative<proto::auth_response>(msg)) {
    handle_auth(self, msg);
    return;
  }
  if (!allowed(self, msg)) return;
  std::visit(
      [&](auto&& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (!proto::is_request_kind(static_cast<uint8_t>(T::tag))) {
          return;  // decode_request() yields requests only
        } else if constexpr (std::is_same_v<T, proto::hello> ||
                             std::is_same_v<T, proto::client_hello>) {
          if (st.who != role::none) {
            refuse_and_close(self, m.head.id,
                             proto::error{proto::err_code::bad_body, "a second HELLO"});
            return;
          }
          if constexpr (std::is_same_v<T, proto::client_hello>) {
            st.who = role::client;
            st.peer_name = m.name;
            write(self, proto::make_client_hello_ok(m.head.id, st.conn->cfg->shards));
          } else {
            st.who = role::worker;
            st.peer_name = m.name;
            bool invoked = (m.offers & proto::offer_invoked) != 0;
            st.invoked = invoked;
            if (m.offers & proto::offer_cluster_map)  // extension: the map, before the LEASE
              write(self, st.conn->owners->map_frame(m.head.id));
            self->send(st.directory, hello_request{origin_of(self, m.head), m.max_shards,
                                                   (m.offers & proto::offer_serve_calls) != 0,
                                                   invoked ? m.invocation.value() : uint64_t{0}});
            self->delayed_send(self, ms(st.conn->cfg->ping_interval_ms), tick_atom::value);
          }
          // From now on the I/O threads serve its log requests and PINGs, if it may send them.
          // ... and its CALLs and CALL_REPLYs go to the directory, within what it may send.
          int scope = usable_scope(st);
          st.conn->greeted.store(true);
          st.conn->direct.store(scope >= static_cast<int>(proto::scope::worker));
          st.conn->calls_scope.store(scope);
          return;
        } else {
          if (st.who == role::none) {
            refuse_and_close(self, m.head.id,
                             proto::error{proto::err_code::bad_body,
                                          "the first frame must be HELLO or CLIENT_HELLO, not " +
                                              proto::kind_name(static_cast<uint8_t>(T::tag))});
            return;
          }
          auto& h = m.head;
          if constexpr (log_requests::has<T>) {
            to_log(*st.conn, std::move(m), false);
            return;
          }
          // Another node's shard: its holder can only be there (a CALL is forwarded instead).
          if constexpr (!std::is_same_v<T, proto::call>) {
            if (h.shard != proto::no_shard)
              if (auto foreign = st.conn->owners->refuse_foreign(h.shard.value())) {
                write(self, proto::make_err(h.id, *foreign));
                return;
              }
          }
          if constexpr (std::is_same_v<T, proto::ping>) {
            write(self, proto::ok{h.id, {}});
          } else if constexpr (std::is_same_v<T, proto::drain>) {
            std::vector<uint32_t> shards;
            for (auto sh : m.shards)
              shards.push_back(sh.value());
            self->send(st.directory, drain_request{origin_of(self, h), std::move(shards)});
          } else if constexpr (std::is_same_v<T, proto::idle>) {
            self->send(st.directory, idle_request{origin_of(self, h),
                                                  reports_of(std::move(m.entries)), st.read_at});
          } else if constexpr (std::is_same_v<T, proto::call>) {
            self->send(st.directory, request_of(origin_of(self, h), std::move(m)));
          } else if constexpr (std::is_same_v<T, proto::call_reply>) {
            self->send(st.directory, request_of(origin_of(self, h), std::move(m)));
          } else if constexpr (std::is_same_v<T, proto::relay>) {
            self->send(st.directory, relay_request{origin_of(self, h), m.target.value(),
                                                   m.outbox_id, std::move(m.payload)});
          } else if constexpr (std::is_same_v<T, proto::message_ack>) {
            self->send(st.directory, ack_request{origin_of(self, h), m.from.value(),
                                                 m.from_epoch.value(), m.outbox_id});
          } else if constexpr (std::is_same_v<T, proto::release>) {
            self->send(st.directory, release_request{origin_of(self, h)});
          }
        }
      },
      std::move(msg));
}

/// What the I/O thread handed on: each frame in order, then the end of the stream if it came.
void on_inbound(session_ptr self, inbound& in) {
  auto& st = self->state;
  st.read_at = in.read_at;
  for (auto& f : in.frames) {
    bool log_request = log_requests::has_kind(f.kind);
    // A node without tokens speaks the normative protocol: the token extension's kinds are
    // unknown to it whatever their bodies hold (PROTOCOL.md §2).
    bool token_kind = f.kind == static_cast<uint8_t>(proto::kind::auth) ||
                      f.kind == static_cast<uint8_t>(proto::kind::auth_proof);
    if (st.closing) {
      // nothing more is read from a connection being closed
    } else if (token_kind && st.auth == auth_phase::open) {
      refuse_and_close(self, proto::peek_id(f.body).value_or(0),
                       proto::error{proto::err_code::unknown_kind,
                                    "frame kind " + std::to_string(f.kind) + " (" +
                                        proto::kind_name(f.kind) +
                                        ") is not a request this server knows: it has no tokens"});
    } else if (!token_kind && proto::is_request_kind(f.kind) && awaits_proof(st)) {
      // Refused undecoded: a peer that proved no token costs no more than its (small) frame.
      refuse_unauthenticated(self, proto::peek_id(f.body).value_or(0), unproven_why(f.kind));
    } else {
      auto m = proto::decode_request(f.kind, f.body);
      if (!m)
        refuse_and_close(self, proto::peek_id(f.body).value_or(0), m.err());
      else
        handle(self, std::move(*m));
    }
    if (log_request) st.conn->log_requests_at_actor.fetch_sub(1);  // it is in the log's queue now
    st.conn->frames_at_actor.fetch_sub(1);  // what it asked of the directory is on its way
  }
  if (st.closing) return;
  if (in.bad != 0) {
    proto::error e{static_cast<proto::err_code>(in.bad), std::move(in.why)};
    if (e.code == proto::err_code::too_large) {
      e.message +=
          awaits_proof(st) ? " (the limit before a token is proven)" : " (limits.max_frame_mb)";
      if (st.conn->limits) st.conn->limits->count(connection_limits::limit::frame_size);
    }
    refuse_and_close(self, 0, e);
  } else if (in.closed) {
    std::string why = !in.why.empty() ? std::move(in.why)
                      : in.read_error != 0
                          ? std::string{"reading from it failed: "} + std::strerror(in.read_error)
                          : std::string{"the peer closed it"};
    end_session(self, why, in.read_error != 0);
  }
}

/// Closes a connection that is too slow to say HELLO or to finish a frame (the I/O threads' sweep
/// says when one may be).
void check_deadline(session_ptr self) {
  auto& st = self->state;
  auto& c = *st.conn;
  if (st.closing) return;
  auto now = connection::now_ns();
  auto cut = [&](connection_limits::limit l, proto::err_code code, std::string why) {
    if (c.limits) c.limits->count(l);
    logging::warn_limited(
        "slow " + st.peer_ip + why,
        fmt::format("closing a slow connection: {} session={} peer={}", why, st.id, st.peer));
    refuse_and_close(self, 0, proto::error{code, std::move(why)});
  };
  if (st.who == role::none && now - c.started_ns >= int64_t{c.cfg->hello_timeout_ms} * 1000000)
    return cut(connection_limits::limit::hello_timeout, proto::err_code::bad_body,
               "no HELLO or CLIENT_HELLO within " + std::to_string(c.cfg->hello_timeout_ms) +
                   " ms of connecting (limits.hello_timeout_ms)");
  auto partial = c.partial_since_ns.load(std::memory_order_relaxed);
  if (partial != 0 && now - partial >= int64_t{c.cfg->frame_timeout_ms} * 1000000)
    return cut(connection_limits::limit::frame_timeout, proto::err_code::bad_frame,
               "a frame begun " + std::to_string(c.cfg->frame_timeout_ms) +
                   " ms ago is still not complete (limits.frame_timeout_ms)");
  c.deadline_told.store(false);  // not due after all (the frame was finished meanwhile)
}

/// The session's stats (docs/operations.md, "session"); the inspector adds the shards it holds.
actor_stats stats_of(session_ptr self) {
  auto& st = self->state;
  auto& c = *st.conn;
  auto now = connection::now_ns();
  actor_stats a{"session", st.id};
  a.state = st.who == role::none     ? "handshake"
            : st.who == role::client ? "client"
            : st.invoked             ? "invoked"
                                     : "worker";
  a.mailbox = self->mailbox().size();
  a.text("peer", st.peer);
  a.text("name", st.peer_name);
  if (st.auth == auth_phase::proven) {
    a.text("token", st.token_name);
    a.text("scope", std::string{proto::scope_name(st.scope)});
  }
  auto out = c.lane()->accepted();
  a.num("framesIn", c.frames_in.load(std::memory_order_relaxed));
  a.num("bytesIn", c.bytes_in.load(std::memory_order_relaxed));
  a.num("framesOut", out.frames);
  a.num("bytesOut", out.bytes);
  a.num("bytesWaiting", c.lane()->waiting());
  a.num("silentMs", (st.who == role::worker ? silence_ns(st)
                                            : now - c.last_rx_ns.load(std::memory_order_relaxed)) /
                        1000000);
  a.num("ageMs", (now - c.started_ns) / 1000000);
  return a;
}

session_conn_actor::behavior_type session_fn(session_ptr self, std::shared_ptr<session_conn> conn,
                                             std::string peer, proto::bytes binding,
                                             session_context ctx) {
  auto& st = self->state;
  st.conn = std::move(conn);
  st.id = st.conn->id;
  st.peer_ip = st.conn->peer_ip;
  st.binding = std::move(binding);
  st.peer = std::move(peer);
  st.directory = std::move(ctx.directory);
  st.sink = ctx.sink;
  st.tokens = ctx.tokens;
  if (st.tokens && st.tokens->required()) st.auth = auth_phase::needed;
  spdlog::debug("connection opened session={} peer={}", st.id, st.peer);
  return {
      [=](inbound& in) { on_inbound(self, in); },
      [=](deadline_atom) { check_deadline(self); },
      [=](frame_atom, const bytes& frame) {
        auto& st = self->state;
        bool lease = st.lease_end == 0 &&
                     proto::kind_of_frame(frame) == static_cast<uint8_t>(proto::kind::lease);
        write_bytes(self, frame);
        if (lease) {
          st.lease_end = st.conn->lane()->accepted().bytes;
          note_lease_out(self);
        }
      },
      [=](overflow_atom) { overflow(self); },
      [=](close_atom, const bytes& frame) {
        write_bytes(self, frame);
        end_session(self, "ended by the directory, after the frame it sent last");
      },
      [=](tick_atom) {
        auto& st = self->state;
        if (st.closing) return;
        note_lease_out(self);
        auto silent = silence_ns(st);
        if (silent >= int64_t{st.conn->cfg->timeout_ms} * 1000000) {
          logging::warn_limited(
              "silent " + st.peer_ip,
              fmt::format("closing a silent connection: no frame from it for {} ms since its "
                          "LEASE or its last frame (liveness.timeout_ms); its leases are revoked "
                          "session={} peer={} name={}",
                          silent / 1000000, st.id, st.peer, logging::quoted(st.peer_name)));
          self->send(st.directory, session_ended{st.id, true});
          return;  // the directory answers with close_atom and the REVOKED frame
        }
        self->delayed_send(self, ms(st.conn->cfg->ping_interval_ms), tick_atom::value);
      },
      [=](stats_atom) { return stats_of(self); },
  };
}

}  // namespace

session_id new_session_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

bool start_session(caf::actor_system& sys, int fd, peer_info peer, const session_context& ctx,
                   int spare) {
  auto conn = std::make_shared<session_conn>(fd, ctx, peer.ip, spare);
  if (!conn->lane()->usable()) {  // out of descriptors: the connection cannot be served
    logging::warn_limited("no descriptor for a connection",
                          fmt::format("closing a new connection: no file descriptor is free for "
                                      "it ({}) peer={}",
                                      std::strerror(errno), peer.ip));
    if (ctx.limits) ctx.limits->release(peer.ip);
    return false;  // conn closes the socket
  }
  auto address = peer.address.empty() ? peer_name(fd) : std::move(peer.address);
  conn->actor = sys.spawn(session_fn, conn, std::move(address), std::move(peer.binding), ctx);
  ctx.sink->add_session(conn->id, caf::actor_cast<session_actor>(conn->actor), conn->lane());
  if (!ctx.loop->add(conn)) {
    int e = errno;
    std::string why = std::string{"the I/O threads cannot watch it: "} + std::strerror(e);
    spdlog::error("cannot watch a new connection: {}", std::strerror(e));
    caf::anon_send(conn->actor, inbound{{}, 0, 0, why, true, e});
  }
  return true;
}

}  // namespace fusee::server
