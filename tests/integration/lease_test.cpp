// Leases, epochs, fencing, standbys, max_shards and liveness against a real server process.
#include <cstdlib>
#include <fstream>

#include "raw_socket.hpp"
#include "server_process.hpp"
#include "worker.hpp"
#include "worker_process.hpp"

using namespace fusee;
using namespace fusee::test;
using proto::err_code;

namespace {

using fixture = server_fixture;

uint64_t epoch_of(const proto::lease& l, uint32_t shard) {
  return test::epoch_of(l.grants, shard);
}

}  // namespace

TEST_CASE("a worker leases every free shard, appends and is told when records are durable") {
  fixture f;
  auto w = f.connect();
  auto lease = w.hello();
  CHECK(lease.id == 1);
  CHECK(lease.shard_count == 4);
  CHECK(lease.ping_interval_ms == 1000);
  CHECK(lease.timeout_ms == 5000);
  CHECK(lease.remaining_ms == 0);
  REQUIRE(lease.grants.size() == 4);
  for (auto& g : lease.grants) {
    CHECK(g.epoch.value() >= 1);
    CHECK(g.durable_lsn.value() == 0);
  }
  uint64_t e = epoch_of(lease, 2);
  w.append(2, e, 1, {record("a"), record("bb")});
  w.append(2, e, 3, {record("ccc")});
  REQUIRE(w.wait_durable(2, 3));
  auto recs = recover_all(w, 2, e);
  REQUIRE(recs.size() == 3);
  CHECK(recs[2] == record("ccc"));
  w.ping(7);
  CHECK(w.expect<proto::ok>().id == 7);
}

TEST_CASE("appends that break the rules are refused with the right code, the connection stays") {
  fixture f;
  auto w = f.connect();
  auto lease = w.hello();
  uint64_t e = epoch_of(lease, 0);
  w.append(0, e, 2, {record("gap")}, 11);
  auto gap = w.expect<proto::err>();
  CHECK(gap.id == 11);
  CHECK(gap.code == uint16_t(err_code::lsn_gap));
  w.append(0, e + 5, 1, {record("future epoch")}, 12);
  CHECK(w.expect<proto::err>().code == uint16_t(err_code::not_holder));
  // A shard the server does not have is not held (PROTOCOL.md §3), at the log and at the
  // directory alike.
  w.append(9, e, 1, {record("no such shard")}, 13);
  auto none = w.expect<proto::err>();
  CHECK(none.id == 13);
  CHECK(none.code == uint16_t(err_code::not_holder));
  CHECK(none.message == "no shard 9 (this server has 4)");
  REQUIRE(w.conn.send(
      proto::release{proto::request_head{15, proto::shard_id{0xFFFFFFFF}, proto::epoch_t{e}}}));
  auto no_release = w.expect<proto::err>();
  CHECK(no_release.id == 15);
  CHECK(no_release.code == uint16_t(err_code::not_holder));
  w.append(0, e, 1, {record("fine")}, 14);
  REQUIRE(w.wait_durable(0, 1));
}

TEST_CASE("a standby takes over with higher epochs, the deposed worker is fenced") {
  fixture f{"[server]\nshards = 4\n[liveness]\nping_interval_ms = 50\ntimeout_ms = 300\n"};
  auto w1 = f.connect();
  auto l1 = w1.hello();
  REQUIRE(l1.grants.size() == 4);
  uint64_t e1 = epoch_of(l1, 1);
  w1.append(1, e1, 1, {record("from w1")});
  REQUIRE(w1.wait_durable(1, 1));

  auto w2 = f.connect();
  auto l2 = w2.hello();
  CHECK(l2.grants.empty());  // a standby
  pinger keep_w2{w2.conn, 50ms};

  // w1 goes silent: the server revokes its leases and closes it; w2 pings and takes over.
  auto revoked = w1.expect<proto::revoked>(5s);
  CHECK(revoked.shards.size() == 4);
  CHECK(revoked.reason.find("liveness") != std::string::npos);
  // The server says why it closed the connection, at the default log level.
  CHECK(f.server.log().find("closing a silent connection: no frame from it for") !=
        std::string::npos);
  std::vector<proto::grant_entry> got;
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (got.size() < 4 && std::chrono::steady_clock::now() < deadline) {
    auto r = w2.next(100ms);
    if (r)
      if (auto* g = std::get_if<proto::grant>(&*r))
        got.insert(got.end(), g->grants.begin(), g->grants.end());
  }
  REQUIRE(got.size() == 4);
  uint64_t e2 = 0;
  for (auto& g : got) {
    CHECK(g.epoch.value() > epoch_of(l1, g.shard.value()));
    if (g.shard.value() == 1) {
      e2 = g.epoch.value();
      CHECK(g.durable_lsn.value() == 1);  // w1's durable record is kept
    }
  }
  // The deposed worker, on a new connection, tries its old epoch: STALE_EPOCH, nothing written.
  auto w1b = f.connect();
  w1b.hello();
  pinger keep_w1b{w1b.conn, 50ms};
  w1b.append(1, e1, 2, {record("deposed")}, 21);
  auto err = w1b.expect<proto::err>();
  CHECK(err.id == 21);
  CHECK(err.code == uint16_t(err_code::stale_epoch));
  // The new holder continues at durable_lsn + 1 and sees no trace of the refused append.
  w2.append(1, e2, 2, {record("from w2")});
  REQUIRE(w2.wait_durable(1, 2));

  f.server.kill9();
  REQUIRE(f.server.start().empty());
  auto w3 = f.connect();
  auto l3 = w3.hello();
  uint64_t e3 = epoch_of(l3, 1);
  CHECK(e3 > e2);  // epochs grow across restarts
  auto recs = recover_all(w3, 1, e3);
  REQUIRE(recs.size() == 2);
  CHECK(recs[0] == record("from w1"));
  CHECK(recs[1] == record("from w2"));
}

#ifdef FUSEE_TEST_HOOKS
TEST_CASE("liveness counts from the LEASE: a worker whose LEASE came after timeout_ms keeps its "
          "leases") {
  // The test hook holds every LEASE back 2 s, as a server slow to grant a million shards would
  // (4 s on this project's VMs). The worker says nothing until its LEASE comes, as PROTOCOL.md §3
  // allows: liveness applies from the LEASE on.
  ::setenv("FUSEE_TEST_LEASE_DELAY_MS", "2000", 1);  // the server process inherits it
  fixture f{"[server]\nshards = 4\n[liveness]\nping_interval_ms = 50\ntimeout_ms = 600\n"};
  ::unsetenv("FUSEE_TEST_LEASE_DELAY_MS");
  auto w = f.connect();
  auto asked = std::chrono::steady_clock::now();
  auto lease = w.hello(0);
  CHECK(std::chrono::steady_clock::now() - asked >= 2000ms);
  REQUIRE(lease.grants.size() == 4);
  // From the LEASE on it pings every 50 ms: three time-outs pass without a REVOKED.
  for (auto until = std::chrono::steady_clock::now() + 1800ms;
       std::chrono::steady_clock::now() < until;) {
    w.ping(0);  // its OK is skipped by next()
    auto r = w.next(50ms);
    REQUIRE_MESSAGE(!r, "got " << proto::kind_name(static_cast<uint8_t>(proto::kind_of(*r))));
    REQUIRE(r.err().message == "timed out");
  }
  w.append(0, epoch_of(lease, 0), 1, {record("after a late LEASE")});
  REQUIRE(w.wait_durable(0, 1));
}

TEST_CASE("liveness does not count the time the server is not reading: a pinging worker keeps its "
          "leases through commits longer than timeout_ms on the one I/O thread") {
  // The test hook starts each fdatasync 1.5 s late, as a disk that stalls. The one I/O thread (the
  // default) reads nothing while it commits, so the worker's PINGs wait unread in the kernel for
  // longer than timeout_ms: that is the server's delay, not the worker's silence.
  ::setenv("FUSEE_TEST_SYNC_DELAY_MS", "1500", 1);  // the server process inherits it
  fixture f{"[server]\nshards = 4\nio_threads = 1\n[liveness]\nping_interval_ms = 50\ntimeout_ms = "
            "600\n"};
  ::unsetenv("FUSEE_TEST_SYNC_DELAY_MS");
  INFO("the server's log: " << f.server.log());  // shown if a check fails
  REQUIRE(f.server.log().find("FUSEE_TEST_SYNC_DELAY_MS=1500 is set") != std::string::npos);
  auto w = f.connect();
  auto lease = w.hello(0);  // the run's first grant writes the epoch reservation: 1.5 s
  REQUIRE(lease.grants.size() == 4);
  pinger keep{w.conn, 50ms};
  auto e = epoch_of(lease, 0);
  // /metrics, gathered at most once a second: the batches the I/O thread committed, and its
  // longest turn since the last gathering, one going on included.
  auto metrics = [&] {
    auto text = http_get(f.server.admin_port(), "/metrics").second;
    auto value = [&](const std::string& name) {
      auto at = text.find("\n" + name + " ");
      REQUIRE_MESSAGE(at != std::string::npos, name << " missing from /metrics");
      return std::stod(text.substr(at + name.size() + 2));
    };
    return std::pair{value("fusee_log_batches_inline_total"),
                     value("fusee_io_longest_turn_seconds")};
  };
  // A commit holds the I/O thread only if that thread makes it: the writer thread, still in the
  // reservation's batch when the first APPEND comes (a loaded machine), may commit it instead
  // while the I/O thread reads on. So appends go on until the I/O thread has made two commits,
  // each 1.5 s long and seen by the gauge.
  int held = 0;
  uint64_t lsn = 0;
  while (held < 2) {
    REQUIRE_MESSAGE(lsn < 6, "the I/O thread committed " << held << " of " << lsn << " appends");
    ++lsn;
    auto inline_before = metrics().first;
    auto sent = std::chrono::steady_clock::now();
    w.append(0, e, lsn, {record("through a stalled sync")});
    bool durable = w.wait_durable(0, lsn);
    auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - sent);
    CAPTURE(lsn);
    CAPTURE(took.count());
    REQUIRE(durable);
    CHECK(took >= 1500ms);                     // the hook held the commit (the test is not vacuous)
    auto [inline_after, longest] = metrics();  // over 1.5 s since the last gathering: fresh
    if (inline_after > inline_before) {
      CHECK(longest >= 1.0);  // the I/O thread's turn held this commit
      ++held;
    }
  }
  for (auto& m : w.pushes)
    CHECK_FALSE(std::holds_alternative<proto::revoked>(m));
  CHECK(f.server.log().find("closing a silent connection") == std::string::npos);
}
#endif

TEST_CASE("a closed connection hands its shards to the standby in connection order") {
  fixture f;
  auto w1 = f.connect();
  REQUIRE(w1.hello().grants.size() == 4);
  auto w2 = f.connect();
  CHECK(w2.hello().grants.empty());
  auto w3 = f.connect();
  CHECK(w3.hello().grants.empty());
  w1.conn.close();
  auto g = w2.expect<proto::grant>();
  size_t n = g.grants.size();
  while (n < 4)
    n += w2.expect<proto::grant>().grants.size();
  CHECK(n == 4);
  CHECK_FALSE(w3.conn.receive(200ms));  // the later standby gets nothing
}

TEST_CASE("max_shards limits a worker, the rest goes to the next") {
  fixture f;
  auto w1 = f.connect();
  auto l1 = w1.hello(proto::offer_serve_calls, 1);
  CHECK(l1.grants.size() == 1);
  auto w2 = f.connect();
  auto l2 = w2.hello(proto::offer_serve_calls, 2);
  CHECK(l2.grants.size() == 2);
  auto w3 = f.connect();
  auto l3 = w3.hello(proto::offer_serve_calls, 5);
  CHECK(l3.grants.size() == 1);
  auto w4 = f.connect();
  CHECK(w4.hello().grants.empty());
  w2.conn.close();  // its 2 shards go to w3 (capacity 4 left) before w4
  size_t n = 0;
  while (n < 2)
    n += w3.expect<proto::grant>().grants.size();
  CHECK(n == 2);
  CHECK_FALSE(w4.conn.receive(200ms));
}

TEST_CASE("RELEASE gives a shard back once durable and the releaser is not its standby") {
  fixture f;
  auto w1 = f.connect();
  auto l1 = w1.hello();
  auto w2 = f.connect();
  CHECK(w2.hello().grants.empty());
  uint64_t e = epoch_of(l1, 3);
  w1.append(3, e, 1, {record("x")});
  REQUIRE(
      w1.conn.send(proto::release{proto::request_head{31, proto::shard_id{3}, proto::epoch_t{e}}}));
  CHECK(w1.expect<proto::ok>().id == 31);
  CHECK(w1.durable[3] == 1);  // durable before the OK
  auto g = w2.expect<proto::grant>();
  REQUIRE(g.grants.size() == 1);
  CHECK(g.grants[0].shard.value() == 3);
  CHECK(g.grants[0].durable_lsn.value() == 1);
  w1.append(3, e, 2, {record("late")}, 32);
  CHECK(w1.expect<proto::err>().code == uint16_t(err_code::stale_epoch));
}

TEST_CASE("the shard count is fixed per data dir") {
  temp_dir tmp;
  {
    server_process s(tmp.path() / "data", "[server]\nshards = 4\n");
    REQUIRE(s.start().empty());
  }
  server_process s(tmp.path() / "data", "[server]\nshards = 8\n");
  auto err = s.start();
  CHECK(err.find("created with 4 shards") != std::string::npos);
}

TEST_CASE("a second server on a data dir in use is refused before it touches the log, and the "
          "first serves on") {
  temp_dir tmp;
  server_process first(tmp.path() / "data", "[server]\nshards = 4\n");
  REQUIRE(first.start().empty());
  auto spare = tmp.path() / "data" / "wal" / "next.prep";
  REQUIRE(await([&] { return std::filesystem::exists(spare); }, 10s));  // filled in the background
  server_process second(tmp.path() / "data", "[server]\nshards = 4\n");
  auto err = second.start();
  CHECK_MESSAGE(err.find("is in use by another process (pid " + std::to_string(first.pid()) +
                         ")") != std::string::npos,
                err);
  CHECK(std::filesystem::exists(spare));  // the first's spare is left alone
  peer w{first.connect()};
  auto lease = w.hello();
  w.append(0, epoch_of(lease, 0), 1, {record("still the only writer")});
  CHECK(w.wait_durable(0, 1));
}

TEST_CASE("bad settings are refused at start with the key named, and the file and line where it "
          "was given") {
  temp_dir tmp;
  auto empty_secret = (tmp.path() / "empty.secret").string();
  std::ofstream{empty_secret} << "\r\n";
  auto secret = (tmp.path() / "good.secret").string();
  std::ofstream{secret} << "s3cret-s3cret-s3cret\n";
  auto short_secret = (tmp.path() / "short.secret").string();
  std::ofstream{short_secret} << "fifteen-bytes..\n";
  for (auto [toml, want] : std::vector<std::pair<std::string, std::string>>{
           {"[server]\nshard = 4\n", "unknown key `server.shard`"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + short_secret + "\"\n",
            "holds fewer than 16 bytes; make one with `openssl rand -hex 32 > "},
           {"[server]\nshards = 0\n", "fusee.toml:2: `server.shards` = 0 is outside"},
           {"[log]\nlevel = \"verbose\"\n",
            "fusee.toml:2: `log.level` = \"verbose\" is not one of trace, debug"},
           // a LEASE of every shard would not fit one frame (PROTOCOL.md §2)
           {"[server]\nshards = 5033164\n", "`server.shards` = 5033164 is outside 1..5033163"},
           {"[server]\nshards = \"4\"\n", "`server.shards` has the wrong type"},
           // a float where an integer belongs (converting 1e42 was undefined behaviour)
           {"[limits]\nmax_connections = 1e42\n",
            "`limits.max_connections` has the wrong type (expected an integer)"},
           {"[liveness]\nping_interval_ms = 500\ntimeout_ms = 400\n",
            "fusee.toml:3: `liveness.timeout_ms` (400) must be greater than"},
           {"[server]\nallowed_hosts = [\"fusee.internal:7402\"]\n",
            "`server.allowed_hosts` entry \"fusee.internal:7402\" is not a host name"},
           {"[server]\nallowed_hosts = \"fusee.internal\"\n",
            "`server.allowed_hosts` has the wrong type"},
           {"[server\n", "fusee.toml:1"},
           {"[[endpoint]]\nsecret_file = \"" + secret + "\"\n", "`endpoint.url` is required"},
           {"[[endpoint]]\nurl = \"ftp://x\"\nsecret_file = \"" + secret + "\"\n",
            "must start with http:// or https://"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\n", "`endpoint.secret_file` is required"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"nope\"\n",
            "cannot be read: No such file or directory"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + empty_secret + "\"\n",
            "is empty"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + secret +
                "\"\nconcurrency = 0\n",
            "fusee.toml:4: `endpoint.concurrency` = 0 is outside 1..4294967295"},
           {"[[endpoint]]\nurl = \"ftp://x\"\nsecret_file = \"" + secret + "\"\n",
            "fusee.toml:1: [[endpoint]] #1 (ftp://x): `endpoint.url` must start with http://"},
           // the url as logs show it: no credential in its user part or query
           {"[[endpoint]]\nurl = \"ftp://u:pw@x/?code=k3y\"\nsecret_file = \"" + secret + "\"\n",
            "[[endpoint]] #1 (ftp://x/): `endpoint.url` must start with http://"},
           // an invocation's IDLE lists every shard it held, in one frame
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + secret +
                "\"\nmax_shards = 960001\n",
            "`endpoint.max_shards` = 960001 is outside 0..960000"},
           {"[limits]\nmax_frame_mb = 1\n[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file "
            "= \"" +
                secret + "\"\nmax_shards = 10001\n",
            "`endpoint.max_shards` = 10001 is over the 10000 shards an invocation's IDLE can list "
            "in one frame of `limits.max_frame_mb` = 1"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + secret +
                "\"\ntypes = \"order\"\n",
            "`endpoint.types` has the wrong type"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + secret +
                "\"\nbudget = 5\n",
            "unknown key `endpoint.budget`"},
           {"[[endpoint]]\nurl = \"http://127.0.0.1:9/\"\nsecret_file = \"" + secret +
                "\"\ncert_file = \"" + secret + "\"\n",
            "need an https:// url"}}) {
    server_process s(tmp.path() / "data", toml);
    auto err = s.start();
    CHECK_MESSAGE(err.find(want) != std::string::npos, err);
  }
}

TEST_CASE("an HTTP listener's host that is no IPv4 literal is refused with the config errors, "
          "before the log is opened") {
  temp_dir tmp;
  auto [rc, out] =
      run_process({fusee_binary(), "server", "--data-dir", (tmp.path() / "data").string(),
                   "--listen", "127.0.0.1:0", "--admin-listen", "localhost:0", "--http-listen",
                   "off", "--inspect-listen", "off"},
                  tmp.path() / "server.log", 20s);
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("`server.admin_listen` = \"localhost:0\": an HTTP listener's host must "
                         "be a numeric IPv4 address (127.0.0.1, 0.0.0.0), not localhost") !=
                    std::string::npos,
                out);
  CHECK(out.find("log recovered") == std::string::npos);
  CHECK_FALSE(std::filesystem::exists(tmp.path() / "data"));
}

TEST_CASE("a taken worker port stops the start, naming the setting, the address and why") {
  temp_dir tmp;
  loopback_listener taken;
  auto at = "127.0.0.1:" + std::to_string(taken.port);
  auto [rc, out] = run_process({fusee_binary(), "server", "--data-dir",
                                (tmp.path() / "data").string(), "--listen", at, "--admin-listen",
                                "127.0.0.1:0", "--http-listen", "off", "--inspect-listen", "off"},
                               tmp.path() / "server.log", 20s);
  CHECK(rc != 0);
  CHECK_MESSAGE(out.find("`server.listen`: cannot listen on " + at + ": Address already in use") !=
                    std::string::npos,
                out);
}

TEST_CASE("fusee --version prints the version /metrics reports, and exits 0") {
  temp_dir tmp;
  auto [rc, out] = run_process({fusee_binary(), "--version"}, tmp.path() / "version.out", 20s);
  CHECK(rc == 0);
  CHECK_MESSAGE(out.rfind("fusee 0.", 0) == 0, out);
}

TEST_CASE("fusee server --settings lists the keys of every table, [cluster] and "
          "[[cluster.nodes]] too") {
  temp_dir tmp;
  auto [rc, out] = run_process({fusee_binary(), "server", "--settings"}, tmp.path() / "s.out", 20s);
  CHECK(rc == 0);
  for (const char* key :
       {"[server] shards = 16", "[limits] max_frame_mb", "[cluster] node",
        "[cluster] cluster_listen", "[cluster] peer_timeout_ms = 3000", "[[cluster.nodes]] name",
        "[[cluster.nodes]] shards", "[[endpoint]] url", "[[token]] file"})
    CHECK_MESSAGE(out.find(key) != std::string::npos, key);
}

TEST_CASE("a usage error (unknown option, missing required option) exits 2 naming it") {
  temp_dir tmp;
  auto [rc, out] =
      run_process({fusee_binary(), "server", "--no-such-option"}, tmp.path() / "a.out", 20s);
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("--no-such-option") != std::string::npos, out);
  std::tie(rc, out) =
      run_process({fusee_binary(), "call", "--server", "127.0.0.1:1", "--shard", "1"},
                  tmp.path() / "b.out", 20s);
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("--method is required") != std::string::npos, out);
  std::tie(rc, out) = run_process(
      {fusee_binary(), "call", "--server", "127.0.0.1:1", "--shard", "-1", "--method", "x"},
      tmp.path() / "c.out", 20s);
  CHECK(rc == 2);  // named as out of range, not "give exactly one of --shard and --workflow"
  CHECK_MESSAGE(out.find("--shard: Value -1 not in range") != std::string::npos, out);
}

TEST_CASE("a client command or fusee call without --server dials $FUSEE_SERVER") {
  temp_dir tmp;
  struct server_env {  // set for the commands below only, also when a check throws
    server_env() { ::setenv("FUSEE_SERVER", "127.0.0.1:1", 1); }
    ~server_env() { ::unsetenv("FUSEE_SERVER"); }
  };
  auto [rc, out, wrc, wout] = [&] {
    server_env env;
    auto [a, b] = run_process({fusee_binary(), "describe", "nobody"}, tmp.path() / "d.out", 30s);
    auto [c, d] = run_process({fusee_binary(), "call", "--shard", "1", "--method", "x"},
                              tmp.path() / "c.out", 30s);
    return std::tuple{a, b, c, d};
  }();
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("cannot connect to 127.0.0.1:1") != std::string::npos, out);
  CHECK(wrc == 2);
  CHECK_MESSAGE(wout.find("cannot connect to 127.0.0.1:1") != std::string::npos, wout);
}

TEST_CASE("a client dialling the HTTP API's or the inspector's port is told it is not the "
          "workers' and clients' port") {
  temp_dir tmp;
  server_process s(tmp.path() / "data", "[server]\nshards = 4\n");
  REQUIRE(s.start().empty());
  auto http = "127.0.0.1:" + std::to_string(s.http_port());
  auto [rc, out] =
      run_process({fusee_binary(), "call", "--server", http, "--shard", "1", "--method", "x"},
                  tmp.path() / "call.out", 60s);
  CHECK(rc == 2);
  // libmicrohttpd closes on the binary frame, or answers 400 (versions differ): either way the
  // message names the port to use.
  CHECK_MESSAGE(out.find("port for workers and clients (`listen`") != std::string::npos, out);
  // The inspector's port answers first, in CAF's protocol: named as no frame of ours.
  std::tie(rc, out) = run_process({fusee_binary(), "call", "--server",
                                   "127.0.0.1:" + std::to_string(s.inspect_port()), "--shard", "1",
                                   "--method", "x"},
                                  tmp.path() / "inspect.out", 60s);
  CHECK(rc == 2);
  CHECK_MESSAGE(out.find("is not Fusee's protocol: is this the server's port for workers and "
                         "clients (`listen`") != std::string::npos,
                out);
  // On the right port, once an answer came the hint is never given: a connection opened (and
  // authenticated) by open() and moved out of it remembers that bytes came.
  auto c = s.connect();
  CHECK_FALSE(c.received_any());
  REQUIRE(client::client_hello(c, "right-port", 10s));
  auto moved = std::move(c);
  CHECK(moved.received_any());
  CHECK(moved.framed_any());  // (a later bad frame is then no other listener's)
}

TEST_CASE("a cluster map in the config is checked at start naming gaps, overlaps and unknown "
          "nodes") {
  temp_dir tmp;
  auto map = [](const std::string& node, const std::string& a, const std::string& b) {
    return "[server]\nshards = 16\n[cluster]\nnode = \"" + node +
           "\"\ncluster_listen = \"127.0.0.1:7410\"\n"
           "[[cluster.nodes]]\nname = \"a\"\ncluster = \"127.0.0.1:7410\"\nlisten = "
           "\"127.0.0.1:7400\"\nshards = \"" +
           a +
           "\"\n[[cluster.nodes]]\nname = \"b\"\ncluster = \"127.0.0.1:7420\"\nlisten = "
           "\"127.0.0.1:7401\"\nshards = \"" +
           b + "\"\n";
  };
  for (auto [toml, want] : std::vector<std::pair<std::string, std::string>>{
           {map("a", "0-7", "10-15"), "[cluster]: shards 8-9 belong to no node"},
           {map("a", "0-9", "6-15"),
            "[cluster]: shards 6-9 belong to both \"a\" (0-9) and \"b\" (6-15)"},
           {map("c", "0-7", "8-15"), "`cluster.node` = \"c\" is not a node of the map"},
           {map("a", "0-7", "8-x"), "`cluster.nodes.shards`: \"8-x\" is not a shard"},
           {"[cluster]\nnode = \"a\"\nport = 3\n", "unknown key `cluster.port`"},
           {[&] {  // b's middleman address is a's
              auto t = map("a", "0-7", "8-15");
              return t.replace(t.find("7420"), 4, "7410");
            }(),
            "node \"b\": `cluster` = \"127.0.0.1:7410\" is also node \"a\"'s `cluster`"},
           {[&] {  // b's middleman address is a's worker port: a link would dial a worker port
              auto t = map("a", "0-7", "8-15");
              return t.replace(t.find("7420"), 4, "7400");
            }(),
            "node \"b\": `cluster` = \"127.0.0.1:7400\" is also node \"a\"'s `listen`"}}) {
    server_process s(tmp.path() / "data", toml);
    auto err = s.start();
    CHECK_MESSAGE(err.find(want) != std::string::npos, err);
  }
}

TEST_CASE("a clustered node warns when the map's worker port for it is not the one it listens on, "
          "and a cluster port in use is named as such") {
  temp_dir tmp;
  auto cluster_port = std::to_string(free_port());
  auto toml = "[server]\nshards = 16\n[cluster]\nnode = \"a\"\ncluster_listen = \"127.0.0.1:" +
              cluster_port +
              "\"\n[[cluster.nodes]]\nname = \"a\"\ncluster = \"127.0.0.1:" + cluster_port +
              "\"\nlisten = \"127.0.0.1:7400\"\nshards = \"0-7\"\n[[cluster.nodes]]\nname = "
              "\"b\"\ncluster = \"127.0.0.1:" +
              std::to_string(free_port()) + "\"\nlisten = \"127.0.0.1:7401\"\nshards = \"8-15\"\n";
  server_process a(tmp.path() / "a", toml);  // on ports of its own, not 7400
  REQUIRE(a.start() == "");
  CHECK_MESSAGE(a.log().find("the cluster map gives this node listen = \"127.0.0.1:7400\" but "
                             "server.listen = \"127.0.0.1:") != std::string::npos,
                a.log());
  server_process twin(tmp.path() / "twin", toml);  // its cluster port is a's
  auto err = twin.start();
  CHECK_MESSAGE(err.find("`cluster.cluster_listen`: cannot listen on 127.0.0.1:" + cluster_port +
                         ": Address already in use") != std::string::npos,
                err);
}

TEST_CASE("the admin HTTP server answers /healthz and names unknown paths") {
  fixture f;
  auto [status, body] = http_get(f.server.admin_port(), "/healthz");
  CHECK(status == 200);
  CHECK(body == R"({"status":"ok"})");
  auto [missing, text] = http_get(f.server.admin_port(), "/nope");
  CHECK(missing == 404);
  CHECK(text.find("/nope") != std::string::npos);
}

TEST_CASE("SIGTERM stops the server while workers are connected, each told SHUTTING_DOWN") {
  fixture f;
  auto w = f.connect();
  w.hello();
  auto idle = f.connect();  // a client that never says anything after its HELLO
  idle.conn.send(proto::client_hello{proto::request_head{1, proto::no_shard, proto::epoch_t{0}},
                                     proto::protocol_version, "idle"});
  auto t0 = std::chrono::steady_clock::now();
  CHECK(f.server.stop() == 0);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  bool told = false;
  for (;;) {  // the worker's last frame
    auto m = w.receive_one(std::chrono::seconds(2));
    if (!m) break;
    if (auto* e = std::get_if<proto::err>(&*m))
      told = e->code == static_cast<uint16_t>(err_code::shutting_down) &&
             e->message == "the server is stopping";
  }
  CHECK(told);
}

TEST_CASE("calls over the parking limits are refused at once naming the limit, and counted") {
  fixture f("[server]\nshards = 4\n[limits]\nmax_parked_per_shard = 2\nmax_parked = 3\n");
  auto c = f.connect();
  REQUIRE(
      c.conn.send(proto::client_hello{proto::request_head{1, proto::no_shard, proto::epoch_t{0}},
                                      proto::protocol_version, "client"}));
  c.expect<proto::ok>();
  auto call = [&](uint64_t id, uint32_t shard) {
    REQUIRE(
        c.conn.send(proto::call{proto::request_head{id, proto::shard_id{shard}, proto::epoch_t{0}},
                                "start", "", proto::bytes{'{', '}'}, 60000}));
  };
  call(10, 1);
  call(11, 1);
  call(12, 1);  // a third for shard 1: over max_parked_per_shard
  auto r = c.expect<proto::call_result>();
  CHECK(r.id == 12);
  CHECK(r.status == static_cast<uint8_t>(proto::call_status::parked_too_long));
  std::string body(r.body.begin(), r.body.end());
  CHECK_MESSAGE(body.find("shard 1 already has 2 calls and messages waiting for a holder "
                          "(limits.max_parked_per_shard); the call did not run") !=
                    std::string::npos,
                body);
  call(13, 2);  // the third parked call of the node
  call(14, 3);  // over max_parked
  r = c.expect<proto::call_result>();
  CHECK(r.id == 14);
  body.assign(r.body.begin(), r.body.end());
  CHECK_MESSAGE(body.find("this node already has 3 calls and messages waiting for holders "
                          "(limits.max_parked)") != std::string::npos,
                body);
  auto [status, metrics] = http_get(f.server.admin_port(), "/metrics");
  CHECK(status == 200);
  CHECK_MESSAGE(metrics.find("\nfusee_parked_refused_total 2\n") != std::string::npos, metrics);
}
