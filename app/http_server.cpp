#include "app/http_server.hpp"

#include "protocol/json_text.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "app/hangup_watch.hpp"
#include "app/url_decoding.hpp"
#include "logging/warning_limiter.hpp"
#include "tls/acceptor.hpp"
#include "tls/terminator.hpp"

namespace fusee::app {

namespace {

/// What a request gets while the server stops (its reply or the request itself too late).
http_reply stopping_reply() {
  return http_reply{503, "application/json",
                    proto::json_error("the server is stopping", "stopping") + "\n"};
}

}  // namespace

/// A request of the async server waiting for its reply.
struct pending_reply {
  std::mutex mu;
  MHD_Connection* conn = nullptr;
  http_server::impl* server = nullptr;
  std::optional<http_reply> reply;
  bool suspended = false;
  bool gone = false;  // the request ended (client gone, server stopping)
  int fd = -1;        // the connection's socket, while suspended and watched for a hang-up
  std::atomic<uint64_t> watch_token{0};  // its hangup_watch token; 0: not watched
  /// Answers with `r` now (under mu, while suspended): no longer watched (before libmicrohttpd
  /// may close the socket), then resumed.
  void resume_with(http_reply r);
};

struct http_server::impl {
  MHD_Daemon* daemon = nullptr;
  handler h;
  async_handler ah;
  gate g;
  size_t max_body = 0;
  std::atomic<uint64_t> bodies_refused{0};  ///< answered 413
  size_t max_bodies = 0;                    ///< options::max_bodies
  std::atomic<size_t> bodies_held{0};       ///< bytes of bodies held by requests now
  uint32_t max_connections = http_server::default_max_connections;
  std::string limit_name;             ///< the setting that sets max_connections, for the log
  std::string host;                   ///< as given, for the log
  std::atomic<uint16_t> port_out{0};  ///< the bound port, once bound
  /// "host:port" with the bound port, for the log.
  std::string listener() const { return host + ":" + std::to_string(port_out.load()); }
  bool behind_terminator = false;  ///< with TLS: MHD is handed socketpair ends
  std::mutex daemon_mu;            ///< the terminator's hand-over against the daemon's stop
  bool daemon_stopped = false;     ///< under daemon_mu
  /// What becomes of new connections at the limit (for the log).
  std::string at_limit = "new ones are closed as they come";
  std::atomic<uint64_t> connections_refused{0};  ///< libmicrohttpd's, at its connection limit
  std::atomic<uint32_t> connections_open{0};     ///< libmicrohttpd's, started and not closed
  /// The limit reached (key "full"; a peer that opens connections in a loop must not fill the
  /// log) and libmicrohttpd's own messages (mostly a peer's malformed request; key: its format
  /// string, a literal of the library's): one a minute of each kind is logged, the others
  /// counted, so that peers cannot fill the log and the dashboard's problems, while another kind
  /// (the daemon out of descriptors, say) still shows at once.
  server::logging::warning_limiter said{64};
  /// Says that the limit is reached, unless it was said in the last minute.
  void say_full() {
    if (said.admit("full"))
      spdlog::warn("{} connections are open ({}): {} listener={} (said once a minute)",
                   max_connections, limit_name, at_limit, listener());
  }
  std::mutex mu;
  std::set<std::shared_ptr<pending_reply>> open;  // async requests not completed yet
  bool stopping = false;                          // under mu: no connection is suspended any more
  // With TLS: this side listens and accepts, a terminator ends TLS and hands MHD the plaintext
  // end of each connection (MHD_add_connection).
  std::unique_ptr<tls::terminator> tls;
  std::unique_ptr<tls::acceptor> tls_acceptor;
  /// The async server's suspended connections, watched for their clients closing: such a request
  /// is answered at once (to nobody), so that its connection closes (after `open` and `mu`: it
  /// goes first, its thread using them).
  std::unique_ptr<hangup_watch> watch;
  std::atomic<uint64_t> hangups{0};  ///< requests whose client closed while they waited
  void on_hangup(uint64_t token) {
    std::shared_ptr<pending_reply> p;
    {
      std::lock_guard lock(mu);
      for (auto& q : open)
        if (q->watch_token == token) p = q;
    }
    if (!p) return;
    std::lock_guard lock(p->mu);
    if (!p->suspended || p->gone || p->watch_token != token) return;
    hangups.fetch_add(1, std::memory_order_relaxed);
    spdlog::debug("HTTP {}: a client closed its connection while its request waited", listener());
    p->resume_with(
        http_reply{499, "application/json",
                   proto::json_error("the client closed the connection", "client_gone") + "\n"});
  }
  ~impl() {
    // Its thread resumes nothing from here on; the watch itself stays (the daemon's thread and
    // responders may still add or remove sockets) until the members go, after the daemon.
    if (watch) watch->stop();
    tls_acceptor.reset();  // no new connections; the terminator stays until the 503s are out
    if (!daemon) return;
    std::set<std::shared_ptr<pending_reply>> left;
    {
      std::lock_guard lock(mu);
      stopping = true;
      left = open;  // those still in their handler answer 503 themselves (on_request)
    }
    for (auto& p : left) {
      std::lock_guard lock(p->mu);
      if (p->suspended && !p->gone) p->resume_with(stopping_reply());
    }
    // Give the polling thread up to 2 s to send those 503s before the daemon closes everything.
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (auto& p : left)
      for (;;) {
        {
          std::lock_guard lock(p->mu);
          if (p->gone) break;
        }
        if (std::chrono::steady_clock::now() > until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    {
      std::lock_guard lock(daemon_mu);  // no hand-over after this: the daemon goes
      daemon_stopped = true;
    }
    MHD_stop_daemon(daemon);
    tls.reset();  // after the daemon: the replies above went through it
  }
};

void pending_reply::resume_with(http_reply r) {
  if (auto token = watch_token.exchange(0); token != 0 && server->watch) server->watch->remove(fd);
  reply = std::move(r);
  suspended = false;
  MHD_resume_connection(conn);
}

void http_responder::operator()(http_reply r) const {
  std::lock_guard lock(p_->mu);
  if (p_->gone || p_->reply) return;
  if (p_->suspended)
    p_->resume_with(std::move(r));
  else
    p_->reply = std::move(r);
}

namespace {

struct request_state {
  http_exchange ex;
  bool started = false;  ///< the access handler has seen the headers
  bool too_large = false;
  bool over_total = false;  ///< its body would have taken bodies_held past max_bodies
  size_t held = 0;          ///< its bytes in bodies_held
  std::shared_ptr<pending_reply> pending;
};

MHD_Result collect_query(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* ex = static_cast<http_exchange*>(cls);
  auto [it, fresh] = ex->query.emplace(key, value ? value : "");
  if (!fresh) {
    if (ex->repeated_query.empty()) ex->repeated_query = key;
    it->second = value ? value : "";
  }
  return MHD_YES;
}

MHD_Result collect_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* ex = static_cast<http_exchange*>(cls);
  std::string k{key};
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  auto [it, fresh] = ex->headers.emplace(k, value ? value : "");
  if (!fresh) {
    ex->repeated_headers.insert(k);
    it->second = value ? value : "";
  }
  return MHD_YES;
}

MHD_Result respond(MHD_Connection* conn, const http_reply& r) {
  auto* resp = MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()),
                                               MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
  for (auto& [name, value] : r.headers)
    MHD_add_response_header(resp, name.c_str(), value.c_str());
  auto rc = MHD_queue_response(conn, r.status, resp);
  MHD_destroy_response(resp);
  return rc;
}

/// 413 for a body over the limit, counted.
MHD_Result refuse_too_large(http_server::impl* self, MHD_Connection* conn) {
  self->bodies_refused.fetch_add(1, std::memory_order_relaxed);
  return respond(
      conn, http_reply{413, "application/json",
                       proto::json_error("body over " + std::to_string(self->max_body) + " bytes",
                                         "body_too_large") +
                           "\n"});
}

/// The bytes of each body that options::max_bodies does not count.
constexpr size_t small_body = 64 * 1024;

MHD_Result on_request(void* cls, MHD_Connection* conn, const char* url, const char* method,
                      const char*, const char* upload, size_t* upload_size, void** con_cls) {
  auto* self = static_cast<http_server::impl*>(cls);
  auto* st = static_cast<request_state*>(*con_cls);
  if (st == nullptr) *con_cls = st = new request_state;  // (on_uri makes it first)
  if (!st->started) {                                    // first call: headers only
    st->started = true;
    st->ex.method = method;
    st->ex.path = url;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, &st->ex);
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, collect_query, &st->ex);
    // Refused before the body is read (MHD then closes the connection instead of reading it).
    if (self->g)
      if (auto refused = self->g(st->ex)) return respond(conn, *refused);
    if (auto n = st->ex.headers.find("content-length"); n != st->ex.headers.end()) {
      char* end = nullptr;
      auto length = std::strtoull(n->second.c_str(), &end, 10);
      if (end != n->second.c_str() && length > self->max_body) return refuse_too_large(self, conn);
    }
    return MHD_YES;
  }
  if (*upload_size > 0) {  // body chunks
    auto n = *upload_size;
    *upload_size = 0;
    if (st->too_large || st->over_total) return MHD_YES;  // read and dropped
    // The first small_body bytes of each body are not counted against max_bodies: a small
    // request (a real invocation's) is never refused because large ones fill the pool.
    size_t had = st->ex.body.size();
    size_t counted = had + n <= small_body ? 0 : had >= small_body ? n : had + n - small_body;
    if (had + n > self->max_body) {
      st->too_large = true;
    } else if (self->max_bodies != 0 && counted != 0 &&
               self->bodies_held.fetch_add(counted) + counted > self->max_bodies) {
      self->bodies_held.fetch_sub(counted);
      st->over_total = true;
    } else {
      if (self->max_bodies != 0) st->held += counted;
      st->ex.body.append(upload, n);
    }
    if (st->too_large || st->over_total) {  // what it held goes now
      self->bodies_held.fetch_sub(st->held);
      st->held = 0;
      std::string{}.swap(st->ex.body);
    }
    return MHD_YES;
  }
  if (st->too_large) return refuse_too_large(self, conn);
  if (st->over_total)
    return respond(conn, http_reply{503, "application/json",
                                    proto::json_error("too many request bodies are being "
                                                      "received at once: try again",
                                                      "busy") +
                                        "\n"});
  if (!self->ah) return respond(conn, self->h(st->ex));
  if (st->pending) {  // resumed: the reply is there
    std::lock_guard lock(st->pending->mu);
    if (st->pending->reply) return respond(conn, *st->pending->reply);
    return MHD_YES;
  }
  st->pending = std::make_shared<pending_reply>();
  st->pending->conn = conn;
  st->pending->server = self;
  {
    std::lock_guard l2(self->mu);
    if (self->stopping) return respond(conn, stopping_reply());
    self->open.insert(st->pending);
  }
  self->ah(st->ex, http_responder{st->pending});
  std::lock_guard lock(st->pending->mu);
  if (st->pending->reply) return respond(conn, *st->pending->reply);
  {
    std::lock_guard l2(self->mu);
    if (self->stopping)  // MHD_stop_daemon must not find a suspended connection
      return respond(conn, stopping_reply());
  }
  st->pending->suspended = true;
  // Its token is set before the socket is watched, so that a hang-up already there is found;
  // it is handled once this returns (on_hangup takes the lock held here).
  if (self->watch)
    if (auto* info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD)) {
      st->pending->fd = info->connect_fd;
      st->pending->watch_token = self->watch->next_token();
      if (!self->watch->add(info->connect_fd, st->pending->watch_token))
        st->pending->watch_token = 0;
    }
  MHD_suspend_connection(conn);
  return MHD_YES;
}

void on_completed(void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
  auto* st = static_cast<request_state*>(*con_cls);
  if (st && st->held != 0) static_cast<http_server::impl*>(cls)->bodies_held.fetch_sub(st->held);
  if (st && st->pending) {
    std::lock_guard lock(st->pending->mu);
    st->pending->gone = true;
    std::lock_guard l2(static_cast<http_server::impl*>(cls)->mu);
    static_cast<http_server::impl*>(cls)->open.erase(st->pending);
  }
  delete st;
  *con_cls = nullptr;
}

/// libmicrohttpd's unescaping of the path and query values, by our rule (url_decoding.hpp).
size_t unescape(void*, MHD_Connection*, char* s) {
  return percent_decode_in_place(s);
}

/// Called with each request line's URI as sent, before anything in it is decoded: the request's
/// state starts here, keeping the raw path (the API decodes its segments one by one, so an
/// escaped '/' stays inside an id). Freed in on_completed, which MHD calls for every request
/// this saw.
void* on_uri(void*, const char* uri, MHD_Connection*) {
  auto* st = new request_state;
  if (uri != nullptr) {
    std::string_view raw{uri};
    st->ex.raw_path = std::string{raw.substr(0, raw.find('?'))};
  }
  return st;
}

sockaddr_in ipv4(const std::string& host, uint16_t port, std::string* err) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    *err = "HTTP listen host must be a numeric IPv4 address, not " + host;
    addr.sin_family = 0;
  }
  return addr;
}

std::unique_ptr<http_server> finish_start(std::unique_ptr<http_server> s, MHD_Daemon* d,
                                          const std::string& host, uint16_t port, std::string* err,
                                          http_server::impl* impl) {
  impl->daemon = d;
  if (d == nullptr) {
    *err =
        "cannot serve HTTP on " + host + ":" + std::to_string(port) + ": " + std::strerror(errno);
    return nullptr;
  }
  auto* info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
  impl->port_out = info ? info->port : port;
  return s;
}

}  // namespace

namespace {

/// MHD's messages. Its connection limit is counted and said once a minute (a peer that opens
/// connections in a loop must not fill the log). Behind a terminator it tries TCP options on the
/// socketpair ends it is given and says so ("Setting TCP_NODELAY ... failed", "Failed to push
/// the data"); there those are noise.
void log_mhd(void* cls, const char* fmt, va_list ap) {
  // A failed start reads errno after this (finish_start): logging must not change it.
  struct keep_errno {
    int saved = errno;
    ~keep_errno() { errno = saved; }
  } keep;
  auto* im = static_cast<http_server::impl*>(cls);
  char line[512];
  std::vsnprintf(line, sizeof(line), fmt, ap);
  std::string_view text{line};
  if (im->behind_terminator &&
      (text.find("TCP_") != text.npos || text.find("Failed to push") != text.npos))
    return;
  if (text.find("connection limit") != text.npos) {
    im->connections_refused++;
    im->say_full();
    return;
  }
  im->said.warn(fmt,
                "HTTP server " + im->listener() + ": " +
                    std::string{text.substr(0, text.find_last_not_of("\n") + 1)},
                false);
}

/// Counts the connections open. In the async mode (epoll) libmicrohttpd stops polling its
/// listening socket at its limit, so new connections wait in the kernel's accept queue.
void on_connection(void* cls, MHD_Connection*, void**, MHD_ConnectionNotificationCode code) {
  auto* im = static_cast<http_server::impl*>(cls);
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    im->connections_open--;
  } else if (++im->connections_open >= im->max_connections) {
    im->say_full();
  }
}

/// With TLS: a tls::acceptor on host:port gives each socket to a terminator, which hands MHD
/// the plaintext end. False and `*err` if the address cannot be bound.
bool start_tls(http_server::impl* im, const std::string& host, uint16_t port, tls::ctx_ptr ctx,
               std::string* err) {
  auto a = tls::acceptor::bind(host, port);
  if (!a) {
    *err = a.err().message;
    return false;
  }
  im->port_out = (*a)->port();
  tls::terminator::options o;
  o.ctx = std::move(ctx);
  std::string body =
      proto::json_error("this server speaks HTTPS (TLS 1.3), not HTTP", "https_only") + "\n";
  o.plaintext_answer = "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\n"
                       "Connection: close\r\nContent-Length: " +
                       std::to_string(body.size()) + "\r\n\r\n" + body;
  o.deliver = [im](tls::handed_over h) {
    // The socketpair's own (AF_UNIX) address: MHD then leaves TCP options alone.
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    ::getsockname(h.fd, reinterpret_cast<sockaddr*>(&from), &from_len);
    // On failure (MHD's connection limit, say) MHD closes the socket itself.
    std::lock_guard lock(im->daemon_mu);
    if (im->daemon_stopped)
      ::close(h.fd);
    else
      (void)MHD_add_connection(im->daemon, h.fd, reinterpret_cast<sockaddr*>(&from), from_len);
  };
  o.what = "HTTP " + im->listener();
  o.max_connections = im->max_connections;  // handshakes count: each holds a descriptor
  o.limit_name = im->limit_name;
  im->tls = tls::terminator::start(std::move(o));
  if (auto r = (*a)->hand_to(*im->tls); !r) {
    *err = r.err().message;
    return false;
  }
  im->tls_acceptor = std::move(*a);
  return true;
}

/// libmicrohttpd's own limit behind a terminator, which holds max_connections (handshakes
/// included). Above it: MHD closes a connection's socket before it counts it gone, so the
/// terminator may hand on a new one a moment before MHD would take it.
unsigned behind_terminator_limit(uint32_t max_connections) {
  return static_cast<unsigned>(std::min<uint64_t>(uint64_t{max_connections} + 64, UINT32_MAX));
}

/// Both modes: a daemon on host:port with `flags`, serving through `im` (with `tls`: the
/// daemon listens on nothing and is given connections).
std::unique_ptr<http_server> start_daemon(std::unique_ptr<http_server> s, http_server::impl* im,
                                          const std::string& host, uint16_t port, unsigned flags,
                                          std::string* err, tls::ctx_ptr tls) {
  auto addr = ipv4(host, port, err);
  if (addr.sin_family == 0) return nullptr;
  im->host = host;
  im->port_out = port;  // the bound one once bound: MHD's messages before name the asked one
  im->behind_terminator = tls != nullptr;
  if (tls) {
    auto* d = MHD_start_daemon(
        flags | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_NO_LISTEN_SOCKET |
            MHD_USE_ITC,
        0, nullptr, nullptr, &on_request, im, MHD_OPTION_EXTERNAL_LOGGER, &log_mhd, im,
        MHD_OPTION_NOTIFY_CONNECTION, &on_connection, im, MHD_OPTION_NOTIFY_COMPLETED,
        &on_completed, im, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT,
        behind_terminator_limit(im->max_connections), MHD_OPTION_UNESCAPE_CALLBACK, &unescape,
        nullptr, MHD_OPTION_URI_LOG_CALLBACK, &on_uri, nullptr, MHD_OPTION_END);
    im->daemon = d;
    if (d == nullptr) {
      *err = "cannot start the HTTP server for " + host + ":" + std::to_string(port);
      return nullptr;
    }
    if (!start_tls(im, host, port, std::move(tls), err)) return nullptr;
    return s;
  }
  auto* d = MHD_start_daemon(
      flags | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, port, nullptr, nullptr,
      &on_request, im, MHD_OPTION_EXTERNAL_LOGGER, &log_mhd, im, MHD_OPTION_SOCK_ADDR, &addr,
      MHD_OPTION_NOTIFY_CONNECTION, &on_connection, im, MHD_OPTION_NOTIFY_COMPLETED, &on_completed,
      im, MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_CONNECTION_LIMIT,
      static_cast<unsigned>(im->max_connections), MHD_OPTION_UNESCAPE_CALLBACK, &unescape, nullptr,
      MHD_OPTION_URI_LOG_CALLBACK, &on_uri, nullptr, MHD_OPTION_END);
  return finish_start(std::move(s), d, host, port, err, im);
}
}  // namespace

/// A server not started yet, with `o`'s bounds and names.
std::unique_ptr<http_server> http_server::make(http_server::options o) {
  std::unique_ptr<http_server> s{new http_server};
  s->impl_ = std::make_unique<impl>();
  s->impl_->g = std::move(o.g);
  s->impl_->max_body = o.max_body;
  s->impl_->max_bodies = o.max_bodies;
  s->impl_->max_connections = o.max_connections;
  s->impl_->limit_name = std::move(o.limit_name);
  return s;
}

std::unique_ptr<http_server> http_server::start(const std::string& host, uint16_t port, handler h,
                                                std::string* err, options o) {
  auto tls = std::move(o.tls);
  auto s = make(std::move(o));
  auto* im = s->impl_.get();
  im->h = std::move(h);
  return start_daemon(std::move(s), im, host, port, MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL,
                      err, std::move(tls));
}

std::unique_ptr<http_server> http_server::start_async(const std::string& host, uint16_t port,
                                                      async_handler h, std::string* err,
                                                      options o) {
  auto tls = std::move(o.tls);
  auto s = make(std::move(o));
  auto* im = s->impl_.get();
  im->ah = std::move(h);
  im->watch = hangup_watch::start([im](uint64_t token) { im->on_hangup(token); }, err);
  if (!im->watch) return nullptr;
  if (!tls) im->at_limit = "new ones wait in the kernel's accept queue until one closes";
  return start_daemon(std::move(s), im, host, port, MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME, err,
                      std::move(tls));
}

std::unique_ptr<http_server> http_server::start(const std::string& host, uint16_t port, handler h,
                                                std::string* err) {
  return start(host, port, std::move(h), err, options{});
}

std::unique_ptr<http_server> http_server::start_async(const std::string& host, uint16_t port,
                                                      async_handler h, std::string* err) {
  return start_async(host, port, std::move(h), err, options{});
}

uint64_t http_server::bodies_refused() const {
  return impl_->bodies_refused.load(std::memory_order_relaxed);
}

size_t http_server::bodies_held() const {
  return impl_->bodies_held.load();
}

uint32_t http_server::connections_open() const {
  return impl_->connections_open.load(std::memory_order_relaxed);
}

uint64_t http_server::connections_refused() const {
  return impl_->connections_refused.load(std::memory_order_relaxed) +
         (impl_->tls ? impl_->tls->refused() : 0);
}

uint64_t http_server::clients_gone() const {
  return impl_->hangups.load(std::memory_order_relaxed);
}

const tls::terminator* http_server::tls() const {
  return impl_->tls.get();
}

uint16_t http_server::port() const {
  return impl_->port_out;
}

http_server::~http_server() = default;

}  // namespace fusee::app
