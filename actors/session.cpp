#include "actors/session.hpp"

#include <atomic>
#include <cstdio>
#include <cstring>

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/io/all.hpp>

#include "actors/connection_limits.hpp"
#include "actors/directory_interface.hpp"
#include "actors/log_sink.hpp"
#include "actors/logging.hpp"
#include "actors/out_lane.hpp"
#include "actors/token_store.hpp"
#include "actors/wal/wal_writer.hpp"
#include "protocol/auth.hpp"
#include "protocol/messages.hpp"

namespace fusee::server {

namespace {

using proto::bytes;

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

struct session_state {
  std::shared_ptr<const node_settings> cfg;
  caf::io::connection_handle hdl;
  std::shared_ptr<out_lane> lane;
  session_id id = 0;
  directory_actor directory;
  wal_writer* wal = nullptr;
  log_sink* sink = nullptr;
  std::shared_ptr<const shard_owners> owners;
  std::shared_ptr<token_store> tokens;
  auth_phase auth = auth_phase::open;
  proto::scope scope = proto::scope::worker;
  std::string token_name;  ///< the proven token's name (never its secret)
  proto::bytes client_nonce, server_nonce;
  proto::bytes binding;  ///< what proofs are bound to: empty without TLS
  std::shared_ptr<connection_limits> limits;
  std::string peer_ip;  ///< what `limits` counts this connection under
  /// APPENDs submitted to the log's queue and not taken by its writer yet (the writer decrements
  /// it): with the batch being written, at most twice limits.max_appends_in_flight are pending.
  std::shared_ptr<std::atomic<uint32_t>> appends_in_flight =
      std::make_shared<std::atomic<uint32_t>>(0);
  bool deadline_pending = false;  ///< a deadline_atom is on its way
  bool partial = false;           ///< the decoder holds part of a frame
  caf::actor_clock::time_point partial_since{};
  proto::frame_decoder decoder;
  role who = role::none;
  caf::actor_clock::time_point last_rx{};
  bool closing = false;
  std::string peer;       ///< host:port of the other side
  std::string peer_name;  ///< the name its HELLO gave
  bool invoked = false;
  uint64_t frames_in = 0, bytes_in = 0;
  caf::actor_clock::time_point started{};
  static inline const char* name = "session";
};

/// The session broker's whole interface: what the directory and the log's sink may send it
/// (session_actor), the network events it handles, and its liveness tick.
using session_broker_actor =
    session_actor::extend<caf::reacts_to<caf::io::new_data_msg>,
                          caf::reacts_to<caf::io::connection_closed_msg>,
                          caf::reacts_to<caf::io::data_transferred_msg>, caf::reacts_to<tick_atom>,
                          caf::reacts_to<deadline_atom>>;

template <class T>
struct broker_of;
template <class... Sigs>
struct broker_of<caf::typed_actor<Sigs...>> {
  using type = caf::io::typed_broker<Sigs...>;
};

using session_ptr = caf::stateful_actor<session_state, broker_of<session_broker_actor>::type>*;
static_assert(std::is_convertible_v<session_broker_actor, session_actor>,
              "the session broker implements what the directory and the log's sink send it");

/// Ends the session once. The lane is closed before the socket is, so the log's writer thread
/// can never send on a descriptor number the kernel has handed to a new connection.
void end_session(session_ptr self, bool close_socket);

/// Hands the bytes waiting in the lane to CAF's buffer (they leave in order, behind what CAF
/// holds already); ends the connection if its peer stopped reading.
void drain_lane(session_ptr self) {
  auto& st = self->state;
  if (st.closing) return;
  bytes out;
  switch (st.lane->drain(out)) {
  case out_lane::drained::ok:
    if (!out.empty()) {
      self->write(st.hdl, out.size(), out.data());
      self->flush(st.hdl);
    }
    return;
  case out_lane::drained::over_limit:
    spdlog::warn("a connection stopped reading: more than {} bytes wait to be written to it "
                 "(limits.write_buffer_mb); closing it{} session={} peer={} name={}",
                 st.lane->limit(), st.who == role::worker ? ", its leases go to standbys" : "",
                 st.id, st.peer, logging::quoted(st.peer_name));
    st.lane->abort();  // drop what waits in CAF's buffer too: the peer does not read it
    end_session(self, true);
    return;
  case out_lane::drained::closed:
    return;
  }
}

/// Sends a frame in the connection's one order (see out_lane.hpp).
void write_bytes(session_ptr self, const bytes& frame) {
  auto& st = self->state;
  if (st.closing) return;
  auto r = st.lane->send(frame);
  if (r == out_lane::outcome::queued || r == out_lane::outcome::wake_owner) drain_lane(self);
}

void write(session_ptr self, const proto::any_message& m) {
  write_bytes(self, proto::encode(m));
}

void end_session(session_ptr self, bool close_socket) {
  auto& st = self->state;
  if (st.closing) return;
  st.closing = true;
  st.lane->close();
  st.sink->remove_session(st.id);
  if (st.limits) st.limits->release(st.peer_ip);
  spdlog::debug("connection closed session={} peer={} name={}", st.id, st.peer,
                logging::quoted(st.peer_name));
  if (st.who == role::worker) self->send(st.directory, session_ended{st.id, false});
  if (close_socket) self->close(st.hdl);
  self->quit();
}

void shutdown(session_ptr self) {
  end_session(self, true);
}

/// Answers a broken request with ERR and closes the connection (PROTOCOL.md §2).
void refuse_and_close(session_ptr self, uint64_t id, const proto::error& e) {
  write(self, proto::make_err(id, e));
  shutdown(self);
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
  if (auto* a = std::get_if<proto::auth_hello>(&msg)) {
    if (st.auth == auth_phase::open) {  // as a server without the extension answers
      refuse_and_close(self, a->head.id,
                       proto::error{proto::err_code::unknown_kind,
                                    "frame kind 48 (AUTH) is not a request this server knows: "
                                    "it has no tokens"});
      return;
    }
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
    if (st.auth == auth_phase::open)
      refuse_and_close(self, r.head.id,
                       proto::error{proto::err_code::unknown_kind,
                                    "frame kind 49 (AUTH_PROOF) is not a request this server "
                                    "knows: it has no tokens"});
    else
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
  st.scope = t->scope;
  st.token_name = t->name;
  auto proof = proto::auth_proof(t->secret, proto::auth_side::server, st.client_nonce,
                                 st.server_nonce, st.binding);
  write(self, proto::auth_ok{r.head.id, static_cast<uint8_t>(t->scope), t->name,
                             proto::bytes(proof.begin(), proof.end())});
  spdlog::debug("token proven session={} peer={} token={} scope={}", st.id, st.peer,
                logging::quoted(t->name), proto::scope_name(t->scope));
}

/// False (and the request answered with ERR UNAUTHORIZED) if the connection may not send it.
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
  if (st.auth != auth_phase::proven) {
    refuse_unauthenticated(
        self, id,
        "this server requires a token: prove one with AUTH before " +
            proto::kind_name(static_cast<uint8_t>(proto::kind_of(msg))) +
            " (docs/protocol.md, \"Extension: tokens\"; the fusee CLI and runtime take "
            "--token-file or FUSEE_TOKEN_FILE)");
    return false;
  }
  auto needed = proto::scope_needed(msg);
  if (needed <= st.scope) return true;
  st.tokens->count_refusal();
  std::string what = proto::kind_name(static_cast<uint8_t>(proto::kind_of(msg)));
  if (auto* c = std::get_if<proto::call>(&msg)) what = "a " + c->method + " CALL";
  auto why = "token \"" + st.token_name + "\" has the " + std::string{proto::scope_name(st.scope)} +
             " scope: " + what + " needs a " + std::string{proto::scope_name(needed)} + " token";
  logging::warn_limited(
      "scope " + st.peer_ip + why,
      fmt::format("refused a request: {} session={} peer={}", why, st.id, st.peer));
  write(self, proto::make_err(id, proto::error{proto::err_code::unauthorized, why}));
  return false;
}

/// Where a request came from, for the directory.
origin origin_of(session_ptr self, const proto::request_head& h) {
  auto& st = self->state;
  return origin{st.id, caf::actor_cast<session_actor>(self), h.id, h.shard.value(),
                h.epoch.value()};
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
            write(self, proto::make_client_hello_ok(m.head.id, st.cfg->shards));
          } else {
            st.who = role::worker;
            st.peer_name = m.name;
            bool invoked = (m.offers & proto::offer_invoked) != 0;
            st.invoked = invoked;
            if (m.offers & proto::offer_cluster_map)  // extension: the map, before the LEASE
              write(self, st.owners->map_frame(m.head.id));
            self->send(st.directory, hello_request{origin_of(self, m.head), m.max_shards,
                                                   (m.offers & proto::offer_serve_calls) != 0,
                                                   invoked ? m.invocation.value() : uint64_t{0}});
            self->delayed_send(self, std::chrono::milliseconds(st.cfg->ping_interval_ms),
                               tick_atom::value);
          }
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
          // Another node's shard: its holder can only be there (a CALL is forwarded instead).
          if constexpr (!std::is_same_v<T, proto::call>) {
            if (h.shard != proto::no_shard)
              if (auto foreign = st.owners->refuse_foreign(h.shard.value())) {
                write(self, proto::make_err(h.id, *foreign));
                return;
              }
          }
          if constexpr (std::is_same_v<T, proto::append>) {
            auto waiting = st.appends_in_flight->load(std::memory_order_acquire);
            if (waiting >= st.cfg->max_appends_in_flight) {  // refused, not closed: wait, resend
              if (st.limits) st.limits->count(connection_limits::limit::appends_in_flight);
              write(self, proto::make_err(
                              h.id, proto::error{proto::err_code::too_large,
                                                 std::to_string(waiting) +
                                                     " APPENDs on this connection wait for the "
                                                     "log (limits.max_appends_in_flight): wait "
                                                     "for DURABLE before sending more"}));
              return;
            }
            st.appends_in_flight->fetch_add(1, std::memory_order_relaxed);
            st.wal->submit(wal_append{st.id, h.id, h.shard, h.epoch, m.first_lsn,
                                      std::move(m.records), st.appends_in_flight});
          } else if constexpr (std::is_same_v<T, proto::recover_log>) {
            st.wal->submit(wal_read{st.id, h.id, h.shard, h.epoch, m.after_lsn, m.max_bytes});
          } else if constexpr (std::is_same_v<T, proto::checkpoint>) {
            st.wal->submit(wal_checkpoint{st.id, h.id, h.shard, h.epoch, m.lsn, std::move(m.data)});
          } else if constexpr (std::is_same_v<T, proto::load_checkpoint>) {
            st.wal->submit(wal_load_checkpoint{st.id, h.id, h.shard, h.epoch});
          } else if constexpr (std::is_same_v<T, proto::ping>) {
            write(self, proto::ok{h.id, {}});
          } else if constexpr (std::is_same_v<T, proto::drain>) {
            std::vector<uint32_t> shards;
            for (auto sh : m.shards)
              shards.push_back(sh.value());
            self->send(st.directory, drain_request{origin_of(self, h), std::move(shards)});
          } else if constexpr (std::is_same_v<T, proto::idle>) {
            self->send(st.directory,
                       idle_request{origin_of(self, h), reports_of(std::move(m.entries))});
          } else if constexpr (std::is_same_v<T, proto::call>) {
            self->send(st.directory, call_request{origin_of(self, h), std::move(m.method),
                                                  std::move(m.type), std::move(m.args), m.park_ms});
          } else if constexpr (std::is_same_v<T, proto::call_reply>) {
            self->send(st.directory, call_reply_request{origin_of(self, h), m.relay, m.ok != 0,
                                                        std::move(m.body)});
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

/// Ticks while the connection owes its HELLO or holds part of a frame, at most a second apart:
/// a pending delayed_send keeps its actor past shutdown, so none may wait longer than that.
void arm_deadline(session_ptr self) {
  auto& st = self->state;
  if (st.deadline_pending || st.closing || (st.who != role::none && !st.partial)) return;
  auto step = std::min<uint32_t>({1000, st.cfg->hello_timeout_ms, st.cfg->frame_timeout_ms});
  st.deadline_pending = true;
  self->delayed_send(self, std::chrono::milliseconds(step), deadline_atom::value);
}

/// Closes a connection that is too slow to say HELLO or to finish a frame.
void check_deadline(session_ptr self) {
  auto& st = self->state;
  st.deadline_pending = false;
  if (st.closing) return;
  auto now = self->clock().now();
  auto cut = [&](connection_limits::limit l, proto::err_code code, std::string why) {
    if (st.limits) st.limits->count(l);
    logging::warn_limited(
        "slow " + st.peer_ip + why,
        fmt::format("closing a slow connection: {} session={} peer={}", why, st.id, st.peer));
    refuse_and_close(self, 0, proto::error{code, std::move(why)});
  };
  if (st.who == role::none &&
      now - st.started >= std::chrono::milliseconds(st.cfg->hello_timeout_ms))
    return cut(connection_limits::limit::hello_timeout, proto::err_code::bad_body,
               "no HELLO or CLIENT_HELLO within " + std::to_string(st.cfg->hello_timeout_ms) +
                   " ms of connecting (limits.hello_timeout_ms)");
  if (st.partial && now - st.partial_since >= std::chrono::milliseconds(st.cfg->frame_timeout_ms))
    return cut(connection_limits::limit::frame_timeout, proto::err_code::bad_frame,
               "a frame begun " + std::to_string(st.cfg->frame_timeout_ms) +
                   " ms ago is still not complete (limits.frame_timeout_ms)");
  arm_deadline(self);
}

/// The session's stats (docs/operations.md, "session"); the inspector adds the shards it holds.
actor_stats stats_of(session_ptr self) {
  auto& st = self->state;
  auto now = self->clock().now();
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
  auto out = st.lane->accepted();
  a.num("framesIn", st.frames_in);
  a.num("bytesIn", st.bytes_in);
  a.num("framesOut", out.frames);
  a.num("bytesOut", out.bytes);
  a.num("bytesWaiting", st.lane->waiting());
  a.num("silentMs",
        std::chrono::duration_cast<std::chrono::milliseconds>(now - st.last_rx).count());
  a.num("ageMs", std::chrono::duration_cast<std::chrono::milliseconds>(now - st.started).count());
  return a;
}

session_broker_actor::behavior_type session_fn(session_ptr self, caf::io::connection_handle hdl,
                                               int fd, peer_info peer, session_context ctx) {
  auto& st = self->state;
  st.cfg = ctx.settings;
  st.limits = ctx.limits;
  // The frame limit in bytes, never above the protocol's (max_frame_mb is at most 96).
  st.decoder =
      proto::frame_decoder{std::min<uint32_t>(st.cfg->max_frame_mb << 20, proto::max_body_size)};
  st.peer_ip = std::move(peer.ip);
  st.binding = std::move(peer.binding);
  st.hdl = hdl;
  st.lane = std::make_shared<out_lane>(fd, st.cfg->write_buffer_mb << 20);
  st.peer = peer.address.empty() ? peer_name(fd) : std::move(peer.address);
  st.id = new_session_id();
  st.directory = std::move(ctx.directory);
  st.wal = ctx.wal;
  st.sink = ctx.sink;
  st.owners = ctx.owners ? ctx.owners : std::make_shared<const shard_owners>();
  st.tokens = ctx.tokens;
  if (st.tokens && st.tokens->required()) st.auth = auth_phase::needed;
  auto* sink = ctx.sink;
  st.last_rx = self->clock().now();
  st.started = st.last_rx;
  spdlog::debug("connection opened session={} peer={}", st.id, st.peer);
  sink->add_session(st.id, caf::actor_cast<session_actor>(self), st.lane);
  self->configure_read(hdl, caf::io::receive_policy::at_most(64 * 1024));
  self->ack_writes(hdl, true);
  arm_deadline(self);  // the HELLO is owed from now on
  return {
      [=](const caf::io::new_data_msg& msg) {
        auto& st = self->state;
        if (st.closing) return;
        st.last_rx = self->clock().now();
        st.bytes_in += msg.buf.size();
        st.decoder.feed(reinterpret_cast<const uint8_t*>(msg.buf.data()), msg.buf.size());
        bool decoded = false;  // a frame ended in this read: a partial one began after it
        while (!st.closing) {
          auto f = st.decoder.next();
          if (!f) {
            auto e = f.err();
            if (e.code == proto::err_code::too_large) {
              e.message += " (limits.max_frame_mb)";
              if (st.limits) st.limits->count(connection_limits::limit::frame_size);
            }
            refuse_and_close(self, 0, e);
            return;
          }
          if (!*f) break;
          st.frames_in++;
          decoded = true;
          auto m = proto::decode_request((*f)->kind, (*f)->body);
          if (!m) {
            refuse_and_close(self, proto::peek_id((*f)->body).value_or(0), m.err());
            return;
          }
          handle(self, std::move(*m));
        }
        if (st.closing) return;
        bool partial = st.decoder.buffered() > 0;
        if (partial && (!st.partial || decoded)) st.partial_since = st.last_rx;
        st.partial = partial;
        arm_deadline(self);
      },
      [=](deadline_atom) { check_deadline(self); },
      [=](frame_atom, const bytes& frame) { write_bytes(self, frame); },
      [=](flush_atom) { drain_lane(self); },  // the writer thread left bytes in the lane
      [=](const caf::io::data_transferred_msg& msg) { self->state.lane->transferred(msg.written); },
      [=](close_atom, const bytes& frame) {
        write_bytes(self, frame);
        shutdown(self);
      },
      [=](tick_atom) {
        auto& st = self->state;
        if (st.closing) return;
        auto silent = self->clock().now() - st.last_rx;
        if (silent >= std::chrono::milliseconds(st.cfg->timeout_ms)) {
          self->send(st.directory, session_ended{st.id, true});
          return;  // the directory answers with close_atom and the REVOKED frame
        }
        self->delayed_send(self, std::chrono::milliseconds(st.cfg->ping_interval_ms),
                           tick_atom::value);
      },
      [=](const caf::io::connection_closed_msg&) { end_session(self, false); },
      [=](stats_atom) { return stats_of(self); },
  };
}

}  // namespace

session_id new_session_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

void fork_session(caf::io::broker* acceptor, caf::io::connection_handle hdl, int fd, peer_info peer,
                  const session_context& ctx) {
  acceptor->fork(session_fn, hdl, fd, std::move(peer), ctx);
}

}  // namespace fusee::server
