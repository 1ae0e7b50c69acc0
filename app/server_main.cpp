#include "app/server_main.hpp"

#include <csignal>
#include <cstdio>
#include <optional>
#include <sstream>

#include <sys/resource.h>

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include "actors/cluster/cluster.hpp"
#include "actors/directory.hpp"
#include "actors/http_client.hpp"
#include "actors/inspect/inspector.hpp"
#include "actors/invoker.hpp"
#include "actors/log_sink.hpp"
#include "actors/message_types.hpp"
#include "actors/net/connection_limits.hpp"
#include "actors/net/descriptor_budget.hpp"
#include "actors/net/io_loop.hpp"
#include "actors/net/listener.hpp"
#include "actors/token_store.hpp"
#include "actors/wake_records.hpp"
#include "actors/wal/wal_writer.hpp"
#include "app/admin_routes.hpp"
#include "app/chained_sharing.hpp"
#include "app/halt_polling.hpp"
#include "app/http_api.hpp"
#include "app/ready_file.hpp"
#include "client/secret_file.hpp"
#include "logging/logging.hpp"
#include "protocol/messages.hpp"
#include "tls/acceptor.hpp"
#include "tls/context.hpp"
#include "tls/peer_refresh.hpp"
#include "tls/tunnel.hpp"

#include <atomic>
#include <functional>
#include <map>

namespace fusee::app {

namespace {

/// How often the cluster's other nodes' hosts are looked up again (their addresses for the
/// places each node keeps on this one's TLS port).
constexpr std::chrono::seconds peer_refresh_period{30};

/// A front's open_plain for an actor CAF publishes on loopback `port`: each connection dials it
/// (none before it is published, 0).
std::function<int(std::string*)> dial_published(std::shared_ptr<std::atomic<uint16_t>> port) {
  return [port](std::string* why) {
    if (*port == 0) {
      *why = "the actor behind it is not published yet";
      return -1;
    }
    return tls::dial_tcp("127.0.0.1", *port, 1000, why);
  };
}

struct node_config : caf::actor_system_config {
  explicit node_config(const server::node_settings& cfg) {
    server::add_server_types(*this);
    load<caf::io::middleman>();
    set("scheduler.max-threads", 2);
    // One shared job queue, not work stealing: CAF 0.17 steals with take_tail(), which walks the
    // victim's whole queue under its lock, so one actor waking 100,000 wake records (the
    // directory ending a worker's leases) cost O(n^2): 119 s for a 100,000-shard timer storm,
    // 2.9 s with sharing. Step latency and throughput showed no difference beyond this
    // machine's noise (docs/benchmarks.md). CAF's sharing wakes a worker for every message one
    // actor sends another; chained_sharing does not when the sender's worker takes it next.
    use_chained_sharing(*this);
    if (cfg.clustered) {  // a silent peer is down after the peer timeout (STACK.md §5.8)
      auto timeout = std::chrono::milliseconds(cfg.cluster_peer_timeout_ms);
      set("middleman.heartbeat-interval", caf::timespan{timeout / 3});
      set("middleman.connection-timeout", caf::timespan{timeout});
    }
  }
};

/// How the node's descriptors are shared (server::plan_descriptors): the soft RLIMIT_NOFILE is
/// raised to the hard one first (often 1,024 against 524,288); when the settings ask for more
/// than it holds, a warning names each share and the limit to raise.
server::descriptor_plan share_descriptors(const server_config& cfg) {
  bool tls = !cfg.tls_cert_file.empty();
  server::descriptor_demand d;
  d.connections = cfg.max_connections;
  d.per_connection = tls ? 4 : 2;  // the socket and the lane's duplicate; TLS: its socketpair too
  d.http_listeners = cfg.http_listen.empty() ? 1 : 2;
  d.http_connections = cfg.max_http_connections;
  d.per_http_connection = tls ? 3 : 1;  // TLS: the terminator's socketpair too
  for (auto& e : cfg.endpoints)
    d.invoker_posts += e.concurrency;  // 64 bits: concurrency may be up to 2^32 - 1 each
  if (cfg.clustered) d.cluster_peers = static_cast<uint32_t>(cfg.cluster.nodes.size() - 1);
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return server::plan_descriptors(d, UINT64_MAX);
  if (r.rlim_cur < r.rlim_max) {
    rlimit up = r;
    up.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &up) == 0) r = up;
  }
  auto p = server::plan_descriptors(
      d, r.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<uint64_t>(r.rlim_cur));
  if (p.cut) {
    std::string posts;
    if (d.invoker_posts > 0)
      posts = ", " + std::to_string(p.invoker_connections) + " of the endpoints' " +
              std::to_string(d.invoker_posts) + " POSTs at once (more wait their turn)";
    spdlog::warn("the settings need about {} file descriptors but this process may open at most "
                 "{} (its hard limit: LimitNOFILE= in a systemd unit, or ulimit -Hn as root); so "
                 "that the log keeps {} for its files (and the cluster its links), it takes at "
                 "most {} of "
                 "limits.max_connections={} worker and client connections, {} of "
                 "limits.max_http_connections={} on each HTTP listener{}",
                 p.wanted, static_cast<uint64_t>(r.rlim_cur),
                 server::reserved_descriptors + d.cluster_peers * server::descriptors_per_peer,
                 p.connections, cfg.max_connections, p.http_connections, cfg.max_http_connections,
                 posts);
  }
  return p;
}

}  // namespace

int run_server(const server_config& cfg, const std::string& ready_file) {
  auto listen = parse_host_port(cfg.listen);
  server::logging::init(*server::logging::parse_level(cfg.log_level));
  auto descriptors = share_descriptors(cfg);

  // Block the stop signals before any thread exists, so only sigwait below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);  // rereads the token files
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto tokens = server::token_store::load(cfg.tokens);
  if (!tokens) {
    spdlog::error("{}", tokens.err().message);
    return 1;
  }
  if ((*tokens)->required())
    spdlog::info("tokens required tokens={} (connections prove one with AUTH, HTTP requests "
                 "send a bearer token)",
                 cfg.tokens.size());
  // Secrets other users of the machine may read: said, not refused (a deployment may rely on
  // it for a while); docs/operations.md, "Securing a node".
  std::map<std::string, std::string> secret_files;  // each file once
  for (auto& t : cfg.tokens)
    secret_files.emplace(t.file, "token file");
  for (auto& e : cfg.endpoints) {
    secret_files.emplace(e.secret_file, "endpoint secret file");
    secret_files.emplace(e.key_file, "endpoint key file");
  }
  secret_files.emplace(cfg.tls_key_file, "TLS key file");
  for (auto& [file, what] : secret_files)
    if (auto exposed = file.empty() ? std::nullopt : client::exposed_secret_file(file, what))
      spdlog::warn("{}", *exposed);

  // The map's address for this node's workers and HTTP API on another port than it listens on:
  // right behind a proxy or NAT that forwards it, else workers following the map never reach it.
  if (cfg.clustered)
    for (auto& n : cfg.cluster.nodes)
      if (n.name == cfg.cluster_node)
        for (auto [field, mapped, setting, bound] :
             {std::tuple{"listen", &n.listen, "server.listen", &cfg.listen},
              std::tuple{"http", &n.http, "server.http_listen", &cfg.http_listen}}) {
          auto m = parse_host_port(*mapped), b = parse_host_port(*bound);
          if (m && b && m->port != b->port)
            spdlog::warn("the cluster map gives this node {} = \"{}\" but {} = \"{}\": workers "
                         "and clients following the map reach it only through a proxy or NAT "
                         "that forwards one port to the other (else correct the map)",
                         field, *mapped, setting, *bound);
        }

  server::log_sink sink;
  server::wal_recovery_report rep;
  auto opened = server::wal_writer::open(server::wal_options::of(cfg), &sink, &rep);
  if (!opened) {
    spdlog::error("{}", opened.err().message);
    return 1;
  }
  auto wal = std::move(*opened);
  // The data dir is this process's now (its lock is held): a ready file from an earlier one would
  // name ports of a process gone. (Before the lock, a second server by mistake would remove the
  // running one's.)
  remove_ready_file(ready_file);
  if (wal->drops_acknowledged())
    spdlog::error("FUSEE_TEST_DROP_ACKNOWLEDGED={} is set: this server acknowledges appends and "
                  "does NOT write them (after:N: each shard's records past LSN N; anything else: "
                  "all of them; a test hook, never set it in production)",
                  std::getenv("FUSEE_TEST_DROP_ACKNOWLEDGED"));
  // The delay hooks (compiled in only with FUSEE_TEST_HOOKS): what each holds back.
  for (auto [name, what] :
       {std::pair{"FUSEE_TEST_LEASE_DELAY_MS", "every LEASE leaves"},
        std::pair{"FUSEE_TEST_SYNC_DELAY_MS", "every batch's fdatasync starts"}})
    if (const char* delay = std::getenv(name))
      spdlog::error("{}={} is set: {} that late, if this build has the test hooks (a test hook, "
                    "never set it in production)",
                    name, delay, what);
  if (const char* at = std::getenv("FUSEE_TEST_FAIL_SYNC_AT_LSN"))
    spdlog::error(
        "FUSEE_TEST_FAIL_SYNC_AT_LSN={} is set: the first batch that takes a shard to that "
        "LSN fails its fdatasync, if this build has the test hooks (a test hook, never "
        "set it in production)",
        at);
  spdlog::info("log recovered records={} batches={} segments={} data_dir={}", rep.records,
               rep.batches, rep.segments, cfg.data_dir);
  for (auto& line : rep.cut_short)
    spdlog::warn("a log segment is shorter than it was made; nothing acknowledged was lost "
                 "reason={}",
                 server::logging::quoted(line));
  if (rep.torn_bytes > 0)
    spdlog::warn("dropped a torn tail of the log bytes={} reason={}", rep.torn_bytes,
                 server::logging::quoted(rep.torn_reason));
  if (auto hint = halt_polling_hint()) spdlog::info("latency hint: {}", *hint);

  int rc = 0;
  // The curl thread outlives the actor system: an endpoint actor still draining its mailbox
  // while the system shuts down may call submit() (a no-op once stopped), never a freed client.
  std::unique_ptr<server::http_client> http;
  {
    // The fronts of listeners CAF serves (below: the inspector's, the cluster's TLS links)
    // outlive the actor system: its middleman closes its own connections as it stops, instead
    // of seeing them cut under it while actors still exit.
    std::unique_ptr<tls::terminator> cluster_tls, inspect_front;
    std::vector<std::unique_ptr<tls::tunnel>> cluster_tunnels;  // dial through cluster_tls
    std::unique_ptr<tls::peer_refresh>
        cluster_refresh;  // tells cluster_tls the nodes' new addresses
    node_config caf_cfg{cfg};
    caf::actor_system sys{caf_cfg};
    auto directory = server::spawn_directory(sys, cfg, wal.get());
    sink.set_directory(directory);
    auto owners = std::make_shared<const server::shard_owners>(cfg);
    // In a cluster: the links to the other nodes, known to the directory before any session.
    tls::ctx_ptr tls_ctx;  // checked by validate(): it loads here as it did there
    if (!cfg.tls_cert_file.empty())
      tls_ctx = *tls::server_context({cfg.tls_cert_file, cfg.tls_key_file, cfg.tls_ca_file});
    server::cluster_actor cluster;
    // With [tls], the links are mutual TLS 1.3 (CAF's middleman speaks plain TCP, on loopback
    // only): a terminator ends the peers' TLS on cluster_listen and connects each link to the
    // cluster actor's loopback port; this node dials each peer through a loopback tunnel. (Both
    // declared before `sys`, above.) Without it CAF serves cluster_listen itself: a front there
    // would bound the links, but cost each forwarded call ~70 us (docs/benchmarks.md), and the
    // port checks no one anyway (loopback or a private network, docs/operations.md).
    auto cluster_internal = std::make_shared<std::atomic<uint16_t>>(0);
    if (cfg.clustered) {
      std::map<std::string, std::string> dial_via;
      if (tls_ctx) {
        tls::terminator::options o;
        o.ctx = tls_ctx;
        o.client_ctx =
            *tls::client_context({cfg.tls_ca_file, cfg.tls_cert_file, cfg.tls_key_file, ""});
        o.handshake_timeout_ms = cfg.cluster_peer_timeout_ms;
        o.open_plain = dial_published(cluster_internal);  // each link, to the cluster actor
        o.what = "cluster";
        // Handshakes from anyone who reaches the port hold descriptors: a few links per node in
        // all, and few from one address, so that one stranger cannot take every place. Besides,
        // each other node has 4 places of its own for connections from its `cluster` host's
        // addresses (resolved now, and again every 30 s), which strangers elsewhere cannot take. (A
        // peer is known by the address it connects from: each node's links leave from its `cluster`
        // host, below, where its host has that address; behind NAT they take the strangers'
        // places.)
        o.max_connections = static_cast<uint32_t>(4 * cfg.cluster.nodes.size() + 16);
        o.max_per_peer = 8;
        o.limit_name = "the cluster's links: 4 per node + 16, 8 handshakes per address";
        o.known_limit_name = "the cluster's links: 4 of the node's own";
        std::vector<tls::peer_refresh::peer> others;
        for (auto& n : cfg.cluster.nodes) {
          auto at = parse_host_port(n.cluster);
          if (n.name == cfg.cluster_node || !at) continue;
          auto ips = tls::addresses_of(at->host);
          o.add_known(ips, 4);  // nodes at one address (one host) share theirs
          if (ips.empty())
            spdlog::warn("cluster node {}: its host {} does not resolve now; connections from it "
                         "take the strangers' places until it does (looked up every {} s)",
                         n.name, at->host, peer_refresh_period.count());
          others.push_back({n.name, at->host, ips});
        }
        // A link may stay silent as long as the peer timeout allows.
        o.stalled_peer_ms = std::max<uint32_t>(30000, cfg.cluster_peer_timeout_ms);
        // Only nodes link: the certificate must name a node's host (workers' certificates from
        // the same CA do not).
        for (auto& n : cfg.cluster.nodes)
          if (auto at = parse_host_port(n.cluster)) o.peer_names.push_back(at->host);
        cluster_tls = tls::terminator::start(std::move(o));
        // The hosts are looked up again while the node runs: a node restarted at a new address
        // keeps its places here.
        cluster_refresh = std::make_unique<tls::peer_refresh>(
            *cluster_tls, std::move(others), 4,
            std::chrono::duration_cast<std::chrono::milliseconds>(peer_refresh_period),
            tls::look_up);
        // The links leave from this node's own `cluster` host, where this host has it, so that
        // the other nodes know them by it (a host with several addresses would otherwise send
        // them from whichever its route picks, and they would take the strangers' places).
        std::vector<std::string> sources;
        if (auto me = parse_host_port(owners->nodes()[owners->self()].cluster)) {
          sources = tls::local_addresses(tls::addresses_of(me->host));
          if (sources.empty())
            spdlog::info("cluster: this node's host {} is no address of this host (a wildcard, "
                         "or behind NAT): its links leave from the addresses its routes pick, "
                         "and the other nodes know them only if they resolve to those",
                         me->host);
        }
        for (auto& n : cfg.cluster.nodes) {
          if (n.name == cfg.cluster_node) continue;
          auto at = parse_host_port(n.cluster);
          auto t =
              tls::tunnel::start(*cluster_tls, at->host, at->port, at->host,
                                 std::min<uint32_t>(cfg.cluster_peer_timeout_ms, 5000), sources);
          if (!t) {  // this peer stays unreachable; the others are served
            spdlog::error("cluster peer {}: {}", n.name, t.err().message);
            continue;
          }
          dial_via[n.name] = "127.0.0.1:" + std::to_string((*t)->port());
          cluster_tunnels.push_back(std::move(*t));
        }
      }
      cluster = server::spawn_cluster(sys, cfg, directory, std::move(dial_via));
      caf::anon_send(directory, server::cluster_ready{server::forwarder_actor{cluster}});
    }
    std::string lerr;
    auto limits = std::make_shared<server::connection_limits>(
        descriptors.connections, cfg.max_connections_per_peer, cfg.max_connections);
    // The threads that read the connections; the one that read an APPEND commits the log itself
    // when nobody else does (no hand-off), any others go on reading.
    server::io_loop::options io;
    io.threads = cfg.io_threads;
    io.sweep_every = std::chrono::milliseconds(
        std::min<uint32_t>({1000, cfg.hello_timeout_ms, cfg.frame_timeout_ms}));
    auto* log = wal.get();
    io.after_turn = [log] { return log->commit(); };
    auto loop = server::io_loop::start(std::move(io));
    std::unique_ptr<server::listener> acceptor;
    if (!loop) {
      lerr = loop.err().message;
    } else {
      acceptor = server::listener::start(
          sys, listen->host, listen->port,
          server::session_context{std::make_shared<const server::node_settings>(cfg), directory,
                                  wal.get(), &sink, owners, *tokens, limits, loop->get()},
          &lerr, tls_ctx);
      if (!acceptor) lerr = "`server.listen`: " + lerr;
    }
    if (!acceptor) {
      spdlog::error("{}", lerr);
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
      if (cluster) caf::anon_send_exit(cluster, caf::exit_reason::user_shutdown);
      rc = 1;
    } else {
      spdlog::info("workers and clients listening shards={} listen={}:{} tls={}", cfg.shards,
                   listen->host, acceptor->port(),
                   !tls_ctx                  ? "off"
                   : cfg.tls_ca_file.empty() ? "on"
                                             : "mutual");
    }
    // The invoker, when endpoints are configured: a curl thread plus scheduler and endpoints.
    server::scheduler_actor scheduler;
    std::shared_ptr<server::wake_records> records;
    if (acceptor && !cfg.endpoints.empty()) {
      http = std::make_unique<server::http_client>(descriptors.invoker_connections);
      // An invoked worker connects back to this node: its own address in the cluster's map.
      auto address = !cfg.advertise.empty() ? cfg.advertise
                     : cfg.clustered        ? owners->nodes()[owners->self()].listen
                                            : listen->host + ":" + std::to_string(acceptor->port());
      auto invoker = server::spawn_invoker(sys, cfg, address, http.get(), directory);
      scheduler = invoker.scheduler;
      records = invoker.records;
      caf::anon_send(directory, server::invoker_ready{scheduler, invoker.records});
      spdlog::info("invoker started endpoints={} server_address={}", cfg.endpoints.size(), address);
    }
    // A listener that cannot start stops the start: the worker listener closes, the node stops.
    auto refuse_start = [&](const char* setting, const std::string& why) {
      spdlog::error("`{}`: {}", setting, why);
      if (!acceptor) return;  // refused already
      acceptor->stop();
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
      rc = 1;
      acceptor.reset();
    };
    // Publishes `actor` over CAF on `address` (that host only): the port, or 0 after refusing
    // the start naming `setting`.
    auto publish_at = [&](const auto& actor, const char* setting, const std::string& address) {
      auto at = parse_host_port(address);
      auto published = sys.middleman().publish(actor, at->port, at->host.c_str(), true);
      if (published) return *published;
      // CAF says only that it could not open the port: a bind there says why.
      auto probe = tls::acceptor::bind(at->host, at->port);
      refuse_start(setting, (probe ? "cannot listen on " + address : probe.err().message) + " (" +
                                sys.render(published.error()) + ")");
      return uint16_t{0};
    };
    // The HTTP API for clients.
    std::unique_ptr<http_api> api;
    if (acceptor && !cfg.http_listen.empty()) {
      auto at = parse_host_port(cfg.http_listen);
      std::string herr;
      api = http_api::start(sys, directory, cfg, *tokens, at->host, at->port, &herr, tls_ctx,
                            descriptors.http_connections);
      if (!api) {
        refuse_start("server.http_listen", herr);
      } else {
        spdlog::info("HTTP API listening http={}:{}", at->host, api->port());
      }
    }
    // Publishes `actor` on a loopback port of its own and puts `front` on `address` (on that
    // host only) in front of it: the bound port, or 0 after refusing the start naming `setting`.
    std::vector<std::unique_ptr<tls::acceptor>> fronts_accepting;
    auto publish_behind = [&](const auto& actor, tls::terminator& front, const char* setting,
                              const std::string& address, std::atomic<uint16_t>& internal) {
      internal = publish_at(actor, setting, "127.0.0.1:0");
      if (internal == 0) return uint16_t{0};
      auto at = parse_host_port(address);
      auto a = tls::acceptor::start(at->host, at->port, front);
      if (!a) {
        refuse_start(setting, a.err().message);
        return uint16_t{0};
      }
      fronts_accepting.push_back(std::move(*a));
      return fronts_accepting.back()->port();
    };
    // The inspector, and `fusee inspect`'s way to it: on inspect_listen only, behind a front that
    // holds it to server::inspect_connections at once.
    server::inspector_actor inspector;
    uint16_t inspect_port = 0;
    if (acceptor) {
      server::inspector_targets t;
      t.node =
          cfg.clustered ? cfg.cluster_node : listen->host + ":" + std::to_string(acceptor->port());
      t.shards = cfg.shards;
      t.directory = directory;
      t.scheduler = scheduler;
      t.records = records;
      if (api) t.gateway = caf::actor_cast<server::stats_actor>(api->gateway());
      t.wal = wal.get();
      t.cluster = cluster;
      t.sessions = &sink;
      inspector = server::spawn_inspector(sys, std::move(t));
      if (cluster)
        caf::anon_send(cluster, caf::put_atom::value,
                       caf::actor_cast<caf::strong_actor_ptr>(inspector));
      if (!cfg.inspect_listen.empty()) {
        auto internal = std::make_shared<std::atomic<uint16_t>>(0);
        tls::terminator::options o;
        o.open_plain = dial_published(internal);
        o.max_connections = server::inspect_connections;
        o.limit_name = "the inspector's " + std::to_string(server::inspect_connections);
        // Until its first byte, as long as a worker's connection may take to say HELLO; 8 such
        // at once from one address.
        o.handshake_timeout_ms = cfg.hello_timeout_ms;
        o.max_per_peer = 8;
        o.what = "inspector";
        inspect_front = tls::terminator::start(std::move(o));
        inspect_port = publish_behind(inspector, *inspect_front, "server.inspect_listen",
                                      cfg.inspect_listen, *internal);
        if (inspect_port != 0)
          spdlog::info("inspector listening inspect={}:{}",
                       parse_host_port(cfg.inspect_listen)->host, inspect_port);
      }
    }
    // The cluster actor, for the other nodes: on cluster_listen only (behind its front), once it
    // knows this node's inspector (a peer's welcome carries it).
    uint16_t cluster_port = 0;
    if (acceptor && cluster && cluster_tls)
      cluster_port = publish_behind(cluster, *cluster_tls, "cluster.cluster_listen",
                                    cfg.cluster_listen, *cluster_internal);
    else if (acceptor && cluster)
      cluster_port = publish_at(cluster, "cluster.cluster_listen", cfg.cluster_listen);
    if (acceptor && cluster) {
      if (cluster_port != 0)
        spdlog::info("cluster listening node={} cluster={}:{} digest={} nodes={} tls={}",
                     cfg.cluster_node, parse_host_port(cfg.cluster_listen)->host, cluster_port,
                     cfg.cluster.digest(), cfg.cluster.nodes.size(), tls_ctx ? "mutual" : "off");
      caf::anon_send(cluster, server::dial_atom::value);  // published: the peers may dial back
    }
    // The admin HTTP server (admin_routes.cpp).
    std::unique_ptr<http_server> admin;
    auto admin_at = parse_host_port(cfg.admin_listen);
    if (acceptor) {
      std::string aerr;
      admin_context actx;
      actx.directory = directory;
      actx.scheduler = scheduler;
      actx.inspector = inspector;
      actx.invoker_configured = !cfg.endpoints.empty();
      actx.cluster = cluster;
      actx.tokens = *tokens;
      actx.hosts = host_allow_list::for_node(cfg, tls_ctx != nullptr);
      actx.limits = limits;
      actx.io_turns = (*loop)->turns();
      if (acceptor->tls()) actx.terminators.emplace_back("workers", acceptor->tls());
      if (api && api->tls()) actx.terminators.emplace_back("http", api->tls());
      actx.log_failure = [w = wal.get()] { return w->failure(); };
      if (cluster_tls) actx.terminators.emplace_back("cluster", cluster_tls.get());
      actx.cluster_links = cluster_tls.get();
      actx.inspect_links = inspect_front.get();
      if (api) actx.api_server = &api->server();
      auto own_server = actx.own_server;
      http_server::options o;
      o.tls = tls_ctx;
      o.g = admin_gate(actx);
      o.max_connections = descriptors.http_connections;
      admin = http_server::start(admin_at->host, admin_at->port, admin_routes(sys, std::move(actx)),
                                 &aerr, std::move(o));
      if (!admin) {
        refuse_start("server.admin_listen", aerr);
      } else {
        own_server->store(admin.get());
        spdlog::info("admin HTTP listening admin={}:{} dashboard={}://{}:{}/", admin_at->host,
                     admin->port(), tls_ctx ? "https" : "http", admin_at->host, admin->port());
      }
    }
    if (acceptor) {
      uint16_t port = acceptor->port();
      std::optional<std::string> unready;
      if (!ready_file.empty()) {
        std::ostringstream out;
        out << "listen=" << listen->host << ":" << port << "\n";
        out << "admin=" << admin_at->host << ":" << admin->port() << "\n";
        if (api)
          out << "http=" << parse_host_port(cfg.http_listen)->host << ":" << api->port() << "\n";
        if (cluster_port != 0)
          out << "cluster=" << parse_host_port(cfg.cluster_listen)->host << ":" << cluster_port
              << "\n";
        if (inspect_port != 0)
          out << "inspect=" << parse_host_port(cfg.inspect_listen)->host << ":" << inspect_port
              << "\n";
        if ((unready = write_ready_file(ready_file, out.str()))) {
          spdlog::error("{}: stopping (a script waiting for it would wait for ever)", *unready);
          rc = 1;
        }
      }
      int sig = 0;
      for (; !unready;) {
        sigwait(&stop_signals, &sig);
        if (sig != SIGHUP) break;
        // Open connections keep the scope they proved; new ones see the files as they are now.
        if (!(*tokens)->required()) {
          spdlog::info("SIGHUP: this node has no [[token]] tables; nothing to reload");
        } else if (auto n = (*tokens)->reload()) {
          spdlog::info("SIGHUP: token files reloaded tokens={}", *n);
        } else {
          spdlog::error("SIGHUP: the token files were not reloaded, the tokens in use stay: {}",
                        n.err().message);
        }
      }
      spdlog::info("stopping signal={}", sig);
      fronts_accepting.clear();  // no new inspectors or TLS links while the actors stop
      acceptor->stop();
      // Every open connection ends with ERR SHUTTING_DOWN (a worker reconnects with backoff):
      // the actor system cannot stop while a session waits for its peer to close.
      auto last = proto::encode(proto::make_err(
          0, proto::error{proto::err_code::shutting_down, "the server is stopping"}));
      for (auto& [id, session] : sink.sessions())
        caf::anon_send(session, server::close_atom::value, last);
      caf::anon_send_exit(directory, caf::exit_reason::user_shutdown);
    }
    if (loop) (*loop)->stop();  // no thread reads or commits after this
    admin.reset();
    api.reset();
    if (inspector) caf::anon_send_exit(inspector, caf::exit_reason::user_shutdown);
    if (cluster) caf::anon_send_exit(cluster, caf::exit_reason::user_shutdown);
    if (scheduler) caf::anon_send_exit(scheduler, caf::exit_reason::user_shutdown);
    if (http) http->stop();
    wal->stop();
    sink.set_directory(server::directory_actor{});
    auto st = wal->get_stats();
    spdlog::info("log stats records={} batches={} batches_inline={} fsyncs={} "
                 "records_per_batch={:.1f} segments_retired={}",
                 st.records, st.batches, st.batches_inline, st.fsyncs,
                 st.batches ? double(st.records) / double(st.batches) : 0.0, st.retired_segments);
    // Removed once the log is stopped and the data dir about to be free: a script that waits for
    // it to go may start the next server on the same data dir.
    remove_ready_file(ready_file);
  }
  return rc;
}

}  // namespace fusee::app
