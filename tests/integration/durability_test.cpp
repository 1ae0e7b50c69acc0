// Crash safety of the log: kill -9 under load, torn tails, paging, checkpoints and retirement.
#include <chrono>
#include <fstream>
#include <functional>
#include <optional>
#include <random>
#include <thread>

#include "server_process.hpp"
#include "worker.hpp"
#include "worker/client.hpp"
#include "worker_process.hpp"

using namespace fusee;
using namespace fusee::test;
namespace fs = std::filesystem;

namespace {

std::map<uint32_t, uint64_t> epochs(const proto::lease& l) {
  std::map<uint32_t, uint64_t> out;
  for (auto& g : l.grants)
    out[g.shard.value()] = g.epoch.value();
  return out;
}

std::vector<fs::path> segments(const fs::path& data) {
  std::vector<fs::path> out;
  for (auto& e : fs::directory_iterator(data / "wal"))
    if (e.path().filename().string().rfind("seg-", 0) == 0)  // not the spare "next.prep"
      out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// Where the file's bytes end before its trailing zeros (a segment's last batch, when that ends in
/// a nonzero byte).
size_t end_before_zeros(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t end = all.size();
  while (end > 0 && all[end - 1] == 0)
    --end;
  return end;
}

}  // namespace

TEST_CASE("kill -9 under load, 20 times: every record reported durable is recovered exactly") {
  temp_dir tmp;
  auto data = tmp.path() / "data";
  const uint32_t shards = 4;
  server_process server(data, "[server]\nshards = 4\n");
  std::map<uint32_t, std::vector<proto::bytes>> sent;  // per shard, index = lsn - 1
  std::map<uint32_t, uint64_t> last_epoch;
  std::mt19937_64 rng{42};
  uint64_t total_durable = 0;

  for (int round = 0; round < 20; ++round) {
    CAPTURE(round);
    auto err = server.start();
    REQUIRE_MESSAGE(err.empty(), err);
    peer w{server.connect()};
    auto lease = w.hello();
    REQUIRE(lease.grants.size() == shards);
    auto ep = epochs(lease);
    // Epochs only grow; the durable LSN covers at least everything we were told was durable,
    // and every recovered record is byte for byte what was sent.
    for (auto& g : lease.grants) {
      uint32_t s = g.shard.value();
      CHECK(g.epoch.value() > last_epoch[s]);
      last_epoch[s] = g.epoch.value();
      auto recovered = recover_all(w, s, g.epoch.value());
      CHECK(recovered.size() == g.durable_lsn.value());
      REQUIRE(recovered.size() <= sent[s].size());
      for (size_t i = 0; i < recovered.size(); ++i)
        REQUIRE(recovered[i] == sent[s][i]);
      // Records sent but not recovered were never acknowledged (checked in the load loop).
      sent[s].resize(recovered.size());
    }
    // Load: pipelined appends on every shard until the server dies.
    std::map<uint32_t, uint64_t> acked;
    std::atomic<bool> stop{false};
    auto crash_after = std::chrono::milliseconds(50 + rng() % 200);
    std::mt19937_64 load_rng{rng()};
    std::thread load([&, rng = load_rng]() mutable {
      uint64_t n = 0;
      while (!stop) {
        uint32_t s = static_cast<uint32_t>(n++ % shards);
        std::vector<proto::bytes> recs;
        size_t k = 1 + rng() % 4;
        for (size_t i = 0; i < k; ++i) {
          std::string r = "r" + std::to_string(round) + "-" + std::to_string(n) + "-" +
                          std::string(rng() % 200, char('a' + rng() % 26));
          recs.push_back(record(r));
        }
        uint64_t first = sent[s].size() + 1;
        proto::append a{proto::request_head{0, proto::shard_id{s}, proto::epoch_t{ep[s]}},
                        proto::lsn_t{first}, recs};
        if (!w.conn.send(a)) break;
        for (auto& r : recs)
          sent[s].push_back(r);
        // Drain whatever arrived, without waiting long.
        auto r = w.next(std::chrono::milliseconds(n % 8 == 0 ? 1 : 0));
        if (!r && w.conn.closed()) break;
      }
      while (w.next(50ms)) {  // collect the last DURABLE frames until the connection dies
      }
    });
    std::this_thread::sleep_for(crash_after);  // when to crash: random, not a synchronisation
    server.kill9();
    stop = true;
    load.join();
    for (auto& [s, lsn] : w.durable) {
      acked[s] = lsn;
      total_durable += lsn;
    }
    // What was acknowledged must survive: remember it for the next round's check.
    err = server.start();
    REQUIRE_MESSAGE(err.empty(), err);
    peer check{server.connect()};
    auto l2 = check.hello();
    for (auto& g : l2.grants) {
      uint32_t s = g.shard.value();
      CHECK(g.durable_lsn.value() >= acked[s]);
      CHECK(g.epoch.value() > last_epoch[s]);
      last_epoch[s] = g.epoch.value();
    }
    check.conn.close();
    server.kill9();
  }
  MESSAGE("records acknowledged over 20 crashes: " << total_durable);
  CHECK(total_durable > 0);
}

namespace {

/// The number under `key` in an inspector view of the admin server's (`path`), as it is now
/// (/metrics is cached for a second).
int64_t admin_stat(const server_process& server, const std::string& path, const std::string& key) {
  auto m = http_get(server.admin_port(), path);
  REQUIRE(m.first == 200);
  auto at = m.second.find("\"" + key + "\":");
  REQUIRE_MESSAGE(at != std::string::npos, key << " in " << m.second);
  return std::stoll(m.second.substr(at + key.size() + 3));
}

/// A counter of the log's, as /v1/log shows it now.
int64_t log_stat(const server_process& server, const std::string& key) {
  return admin_stat(server, "/v1/log", key);
}

/// Appends `n` records to shard 0 one at a time, each waiting for its DURABLE; `after_hello` runs
/// once the LEASE came, before the first APPEND.
void sequential_appends(server_process& server, int n,
                        const std::function<void()>& after_hello = {}) {
  peer w{server.connect()};
  auto l = w.hello();
  auto e = epoch_of(l.grants, 0);
  if (after_hello) after_hello();
  for (int i = 1; i <= n; ++i) {
    w.append(0, e, static_cast<uint64_t>(i), {record("step-" + std::to_string(i))});
    REQUIRE(w.wait_durable(0, static_cast<uint64_t>(i)));
  }
}

}  // namespace

TEST_CASE("grants made without an fdatasync of their own are below every epoch granted after "
          "kill -9") {
  temp_dir tmp;
  server_process server(tmp.path() / "data", "[server]\nshards = 4\n");
  std::map<uint32_t, uint64_t> last_epoch;
  for (int round = 0; round < 5; ++round) {
    CAPTURE(round);
    auto err = server.start();
    REQUIRE_MESSAGE(err.empty(), err);
    std::map<uint32_t, uint64_t> granted;
    {
      peer first{server.connect()};
      auto l = first.hello();  // the run's first grants write the epoch reservation
      REQUIRE(l.grants.size() == 4);
      for (auto& g : l.grants) {
        CHECK(g.epoch.value() > last_epoch[g.shard.value()]);
        last_epoch[g.shard.value()] = g.epoch.value();
      }
      peer standby{server.connect()};
      REQUIRE(standby.hello().grants.empty());
      first.conn.close();  // its leases end and go to the standby: grants within the reservation
      while (granted.size() < 4)
        for (auto& g : standby.expect<proto::grant>().grants)
          granted[g.shard.value()] = g.epoch.value();
      CHECK(log_stat(server, "grantsWithoutFsync") >= 4);
      server.kill9();  // nothing of those four grants was ever written
    }
    for (auto& [s, e] : granted) {
      CHECK(e > last_epoch[s]);
      last_epoch[s] = e;
    }
  }
  REQUIRE(server.start().empty());
  peer after{server.connect()};
  for (auto& g : after.hello().grants)
    CHECK(g.epoch.value() > last_epoch[g.shard.value()]);
}

TEST_CASE("the I/O thread that read an APPEND writes and syncs it itself when the log is idle, "
          "with one I/O thread (the default) and with two") {
  for (const char* threads : {"io_threads = 1\n", "io_threads = 2\n"}) {
    CAPTURE(threads);
    temp_dir tmp;
    server_process server(tmp.path() / "data", std::string("[server]\nshards = 2\n") + threads);
    REQUIRE(server.start().empty());
    auto before = log_stat(server, "batchesInline");
    // The run's first grant writes the epoch reservation on the writer thread, which keeps the
    // committer role (and takes the APPENDs that come) until it finds the queue empty: on a
    // loaded machine several steps can arrive first. Nothing else hands the log work here, so
    // once it let the role go, the log is idle at every step.
    sequential_appends(server, 50, [&] {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (log_stat(server, "committing") != 0)
        REQUIRE(std::chrono::steady_clock::now() < deadline);
    });
    // Each step's batch is written by the thread that read it (a grant or two may not be).
    CHECK(log_stat(server, "batchesInline") - before >= 45);
    CHECK(log_stat(server, "records") >= 50);
  }
}

TEST_CASE("a torn last batch is dropped on recovery and nothing before it is lost") {
  temp_dir tmp;
  auto data = tmp.path() / "data";
  server_process server(data, "[server]\nshards = 2\n");
  REQUIRE(server.start().empty());
  {
    peer w{server.connect()};
    auto l = w.hello();
    auto e = epochs(l)[0];
    for (uint64_t i = 1; i <= 10; ++i) {  // one batch per record
      w.append(0, e, i, {record("record-" + std::to_string(i))});
      REQUIRE(w.wait_durable(0, i));
    }
  }
  server.kill9();
  auto segs = segments(data);
  REQUIRE_FALSE(segs.empty());
  auto last = segs.back();
  {  // a torn write: the last 3 bytes of the last batch never reached the disk
    size_t end = end_before_zeros(last);
    REQUIRE(end > 3);
    std::fstream f(last, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(end - 3));
    f.write("\0\0\0", 3);
  }
  REQUIRE(server.start().empty());
  CHECK(server.log().find("torn tail") != std::string::npos);
  peer w{server.connect()};
  auto l = w.hello();
  auto e = epochs(l)[0];
  auto recs = recover_all(w, 0, e);
  REQUIRE(recs.size() == 9);
  for (size_t i = 0; i < 9; ++i)
    CHECK(recs[i] == record("record-" + std::to_string(i + 1)));
  w.append(0, e, 10, {record("again")});
  REQUIRE(w.wait_durable(0, 10));
}

TEST_CASE("a last segment cut short in its zeros starts with a warning and every record, and one "
          "cut at the end of a batch stops the start") {
  temp_dir tmp;
  auto data = tmp.path() / "data";
  server_process server(data, "[server]\nshards = 1\nsegment_mb = 1\n");
  REQUIRE(server.start().empty());
  {
    peer w{server.connect()};
    auto e = epochs(w.hello())[0];
    for (uint64_t i = 1; i <= 10; ++i) {
      w.append(0, e, i, {record("record-" + std::to_string(i) + "x")});
      REQUIRE(w.wait_durable(0, i));
    }
  }
  server.kill9();
  // Where the last segment's batches end: end_before_zeros (records end in 'x', never zero).
  auto last = segments(data).back();
  auto made = fs::file_size(last);
  fs::resize_file(last, end_before_zeros(last) + 100);
  REQUIRE(server.start().empty());
  CHECK(server.log().find("a log segment is shorter than it was made") != std::string::npos);
  CHECK(fs::file_size(last) == made);
  {
    peer w{server.connect()};
    auto e = epochs(w.hello())[0];
    auto recs = recover_all(w, 0, e);
    REQUIRE(recs.size() == 10);
    CHECK(recs[9] == record("record-10x"));
    // The last batch then holds a record (its grant's epoch would end in zero bytes).
    w.append(0, e, 11, {record("record-11x")});
    REQUIRE(w.wait_durable(0, 11));
  }
  server.kill9();
  fs::resize_file(last, end_before_zeros(last));
  auto err = server.start();
  CHECK(err.find("cut short") != std::string::npos);
  CHECK_MESSAGE(err.find("(it ends with one)") != std::string::npos, err);
  CHECK(err.find(last.string()) != std::string::npos);
}

TEST_CASE("damage before the tail stops the start with a clear message") {
  temp_dir tmp;
  auto data = tmp.path() / "data";
  server_process server(data, "[server]\nshards = 1\nsegment_mb = 1\n");
  REQUIRE(server.start().empty());
  {
    peer w{server.connect()};
    auto e = epochs(w.hello())[0];
    std::string big(64 * 1024, 'x');
    for (uint64_t i = 1; i <= 40; ++i) {  // 2.5 MiB: at least 3 segments
      w.append(0, e, i, {record(big)});
      REQUIRE(w.wait_durable(0, i));
    }
  }
  server.kill9();
  auto segs = segments(data);
  REQUIRE(segs.size() >= 2);
  {
    std::fstream f(segs.front(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\xff');
  }
  auto err = server.start();
  CHECK(err.find("not the last segment") != std::string::npos);
}

TEST_CASE("RECOVER_LOG pages a large shard, the first record always comes") {
  temp_dir tmp;
  server_process server(tmp.path() / "data", "[server]\nshards = 1\n");
  REQUIRE(server.start().empty());
  peer w{server.connect()};
  auto e = epochs(w.hello())[0];
  std::vector<proto::bytes> want;
  for (uint64_t i = 0; i < 1000; i += 50) {
    std::vector<proto::bytes> recs;
    for (uint64_t k = 0; k < 50; ++k)
      recs.push_back(record(std::to_string(i + k) + std::string(1000, 'p')));
    want.insert(want.end(), recs.begin(), recs.end());
    w.append(0, e, i + 1, recs);
  }
  REQUIRE(w.wait_durable(0, 1000));
  auto got = recover_all(w, 0, e, 0, 10'000);
  REQUIRE(got.size() == want.size());
  CHECK(got == want);
  // A page smaller than one record still returns that record.
  REQUIRE(w.conn.send(proto::recover_log{
      proto::request_head{5, proto::shard_id{0}, proto::epoch_t{e}}, proto::lsn_t{10}, 1}));
  auto page = w.expect<proto::log_page>();
  CHECK(page.first_lsn.value() == 11);
  REQUIRE(page.records.size() == 1);
  CHECK(page.records[0] == want[10]);
  CHECK(page.more == 1);
  CHECK(page.durable_lsn.value() == 1000);
  // Nothing after the end.
  REQUIRE(w.conn.send(proto::recover_log{
      proto::request_head{6, proto::shard_id{0}, proto::epoch_t{e}}, proto::lsn_t{1000}, 100}));
  auto end = w.expect<proto::log_page>();
  CHECK(end.records.empty());
  CHECK(end.more == 0);
}

TEST_CASE("checkpoints survive restarts and retire the segments they cover") {
  temp_dir tmp;
  auto data = tmp.path() / "data";
  server_process server(data, "[server]\nshards = 2\nsegment_mb = 1\n");
  REQUIRE(server.start().empty());
  uint64_t n = 0;
  {
    peer w{server.connect()};
    auto ep = epochs(w.hello());
    std::string big(32 * 1024, 'c');
    for (n = 1; n <= 100; ++n) {  // about 3 MiB, one batch each
      w.append(0, ep[0], n, {record(big)});
      REQUIRE(w.wait_durable(0, n));
    }
    --n;
    CHECK(segments(data).size() >= 3);
    // Checkpointing beyond the durable LSN is refused.
    REQUIRE(w.conn.send(
        proto::checkpoint{proto::request_head{40, proto::shard_id{0}, proto::epoch_t{ep[0]}},
                          proto::lsn_t{n + 1}, record("too far")}));
    CHECK(w.expect<proto::err>().id == 40);
    REQUIRE(w.conn.send(
        proto::checkpoint{proto::request_head{41, proto::shard_id{0}, proto::epoch_t{ep[0]}},
                          proto::lsn_t{n}, record("state at 100")}));
    CHECK(w.expect<proto::ok>().id == 41);
    auto left = segments(data);
    std::string names;
    for (auto& p : left)
      names += p.filename().string() + "(" + std::to_string(fs::file_size(p)) + ") ";
    CHECK_MESSAGE(left.size() == 1, names);  // every older segment was covered by the checkpoint
    REQUIRE(w.conn.send(proto::load_checkpoint{
        proto::request_head{42, proto::shard_id{1}, proto::epoch_t{ep[1]}}}));
    auto none = w.expect<proto::checkpoint_data>();
    CHECK(none.lsn.value() == 0);
    CHECK(none.data.empty());
  }
  server.kill9();
  REQUIRE(server.start().empty());
  peer w{server.connect()};
  auto ep = epochs(w.hello());
  REQUIRE(w.conn.send(
      proto::load_checkpoint{proto::request_head{43, proto::shard_id{0}, proto::epoch_t{ep[0]}}}));
  auto c = w.expect<proto::checkpoint_data>();
  CHECK(c.lsn.value() == n);
  CHECK(c.data == record("state at 100"));
  // Retired records cannot be read; records after the checkpoint can.
  REQUIRE(w.conn.send(proto::recover_log{
      proto::request_head{44, proto::shard_id{0}, proto::epoch_t{ep[0]}}, proto::lsn_t{0}, 1000}));
  auto err = w.expect<proto::err>();
  CHECK(err.message.find("retired") != std::string::npos);
  w.append(0, ep[0], n + 1, {record("after")});
  REQUIRE(w.wait_durable(0, n + 1));
  auto after = recover_all(w, 0, ep[0], n);
  REQUIRE(after.size() == 1);
  CHECK(after[0] == record("after"));
}

#ifdef FUSEE_TEST_HOOKS  // the test hook that fails an fdatasync

namespace {

/// A counter of the directory's, as /v1/actors shows it now.
int64_t directory_stat(const server_process& server, const std::string& key) {
  return admin_stat(server, "/v1/actors?kind=directory", key);
}

}  // namespace

TEST_CASE("a node without endpoints says halted in /v1/invoker once its log failed, as a "
          "scheduler would") {
  ::setenv("FUSEE_TEST_FAIL_SYNC_AT_LSN", "2", 1);  // the server process inherits it
  server_fixture f{"[server]\nshards = 1\n"};
  ::unsetenv("FUSEE_TEST_FAIL_SYNC_AT_LSN");
  auto admin = f.server.admin_port();
  CHECK(http_get(admin, "/v1/invoker").second.find("\"halted\":false") != std::string::npos);
  auto w = f.connect();
  auto lease = w.hello();
  auto e = epoch_of(lease.grants, 0);
  w.append(0, e, 1, {record("durable")});
  REQUIRE(w.wait_durable(0, 1));
  w.append(0, e, 2, {record("lost")});
  w.expect<proto::io_failed>();
  auto [status, body] = http_get(admin, "/v1/invoker");
  CHECK(status == 200);
  CHECK_MESSAGE(body.find("\"halted\":true") != std::string::npos, body);
}

TEST_CASE("after a failed fdatasync the holder hears IO_FAILED, appends and RELEASE get ERR IO, "
          "/healthz and /readyz fail, the invoker halts, and the failed log's shards go to no "
          "standby") {
  temp_dir tmp;
  auto secret = (tmp.path() / "ep.secret").string();
  std::ofstream(secret) << "s3cret-s3cret-s3cret\n";
  // The test hook fails the fdatasync of the batch that takes a shard to LSN 2. (Port 1 refuses
  // connections: the endpoint's POSTs fail and back off.)
  ::setenv("FUSEE_TEST_FAIL_SYNC_AT_LSN", "2", 1);  // the server process inherits it
  server_fixture f{"[server]\nshards = 2\n[[endpoint]]\nurl = \"http://127.0.0.1:1/invoke\"\n"
                   "secret_file = \"" +
                   secret + "\"\n"};
  ::unsetenv("FUSEE_TEST_FAIL_SYNC_AT_LSN");
  INFO("the server's log: " << f.server.log());
  REQUIRE(f.server.log().find("FUSEE_TEST_FAIL_SYNC_AT_LSN=2 is set") != std::string::npos);
  auto admin = f.server.admin_port();
  CHECK(http_get(admin, "/healthz").first == 200);
  CHECK(http_get(admin, "/v1/invoker").second.find("\"halted\":false") != std::string::npos);
  auto w = f.connect();
  auto lease = w.hello();
  REQUIRE(lease.grants.size() == 2);
  auto standby = f.connect();
  REQUIRE(standby.hello().grants.empty());
  pinger keep_standby{standby.conn, 200ms};  // through a slow run
  std::optional<pinger> keep_w{std::in_place, w.conn, 200ms};
  auto e0 = epoch_of(lease.grants, 0), e1 = epoch_of(lease.grants, 1);
  w.append(0, e0, 1, {record("durable")});
  REQUIRE(w.wait_durable(0, 1));
  w.append(0, e0, 2, {record("lost")});
  auto failed = w.expect<proto::io_failed>();
  CHECK(failed.shard.value() == 0);
  CHECK(failed.epoch.value() == e0);
  CHECK(failed.message.find("Input/output error") != std::string::npos);
  w.append(0, e0, 2, {record("refused")}, 7);
  auto refused = w.expect<proto::err>();
  CHECK(refused.id == 7);
  CHECK(refused.code == uint16_t(proto::err_code::io));
  CHECK(w.durable[0] == 1);
  // Where operators and orchestrators look (the error's text, which names files, is in /v1/log).
  auto [hs, health] = http_get(admin, "/healthz");
  CHECK(hs == 503);
  CHECK(health.find("\"status\":\"log failed\"") != std::string::npos);
  auto [rs, ready] = http_get(admin, "/readyz");
  CHECK(rs == 503);
  CHECK(ready.find("\"ready\":false") != std::string::npos);
  CHECK(ready.find("\"logFailed\":true") != std::string::npos);
  auto [ls, log_row] = http_get(admin, "/v1/log");
  CHECK(ls == 200);
  CHECK(log_row.find("Input/output error") != std::string::npos);
  // The invoker sends nothing more (no invoked worker could lease a shard until restart).
  REQUIRE(await(
      [&] {
        return http_get(admin, "/v1/invoker").second.find("\"halted\":true") != std::string::npos;
      },
      10s));
  auto [as, scheduler] = http_get(admin, "/v1/actors?kind=scheduler");
  CHECK(as == 200);
  CHECK(scheduler.find("\"state\":\"halted\"") != std::string::npos);
  CHECK(scheduler.find("Input/output error") != std::string::npos);
  auto halted_ready = http_get(admin, "/readyz").second;  // not ready for the log, not the invoker
  CHECK(halted_ready.find("\"invokerStarted\":true") != std::string::npos);
  CHECK(halted_ready.find("\"logFailed\":true") != std::string::npos);
  // A RELEASE after the failure: the lease ends, but the shard gets no new holder.
  REQUIRE(
      w.conn.send(proto::release{proto::request_head{31, proto::shard_id{1}, proto::epoch_t{e1}}}));
  auto release = w.expect<proto::err>();
  CHECK(release.id == 31);
  CHECK(release.code == uint16_t(proto::err_code::io));
  CHECK(release.message.find("Input/output error") != std::string::npos);
  // The worker leaves: shard 0 goes the same way.
  keep_w.reset();
  w.conn.close();
  REQUIRE(await([&] { return directory_stat(f.server, "shardsBlocked") >= 2; }, 10s));
  CHECK(directory_stat(f.server, "shardsBlocked") == 2);
  CHECK(directory_stat(f.server, "heldShards") == 0);
  // Their wake records heard the lease end and became due, but the halted invoker sends no POST
  // for them: a negative check, so it waits out the endpoint's backoff and the shards' own.
  auto invoker_stat = [&](const std::string& key) {
    return admin_stat(f.server, "/v1/invoker", key);
  };
  auto posts = invoker_stat("invocations");
  REQUIRE(
      await([&] { return invoker_stat("dueShards") + invoker_stat("backoffShards") >= 2; }, 10s));
  std::this_thread::sleep_for(std::chrono::milliseconds(invoker_stat("backoffMs")) + 500ms);
  CHECK(invoker_stat("invocations") == posts);
  CHECK(invoker_stat("invokingShards") == 0);
  CHECK(invoker_stat("dueShards") == 2);
  // Nothing is offered to the standby (the count above comes after any GRANT would have).
  auto nothing = standby.next(300ms);
  REQUIRE_FALSE(nothing);
  CHECK(nothing.err().message == "timed out");
  // A call for a shard without a holder is answered at once (no lease can be granted before a
  // restart), naming the failure, not after its parking with "no holder took it".
  auto client = worker::workflow_client::connect("127.0.0.1:" + std::to_string(f.server.port()));
  REQUIRE_MESSAGE(client, (client ? "" : client.err().message));
  auto answer = client->call("any", "result", "", worker::json{{"id", "any"}}, 30000);
  REQUIRE(answer);
  CHECK(answer->status == proto::call_status::parked_too_long);
  CHECK_MESSAGE(answer->error().find("no holder and the log failed (") != std::string::npos,
                answer->body.dump());
}

#endif

TEST_CASE("a data dir deleted under a running server fails its log within seconds, and a server "
          "started there afterwards is not written to by the first") {
  server_fixture f{"[server]\nshards = 1\n"};
  auto data = f.tmp.path() / "data";
  auto admin = f.server.admin_port();
  auto w = f.connect();
  auto e = epoch_of(w.hello().grants, 0);
  w.append(0, e, 1, {record("before")});
  REQUIRE(w.wait_durable(0, 1));
  fs::remove_all(data);
  REQUIRE(await([&] { return http_get(admin, "/healthz").first == 503; }, 10s));
  INFO("the server's log: " << f.server.log());
  CHECK(f.server.log().find("fusee.lock is gone") != std::string::npos);
  CHECK(http_get(admin, "/v1/log").second.find("fusee.lock is gone") != std::string::npos);
  w.append(0, e, 2, {record("after")}, 9);
  auto refused = w.expect<proto::err>();
  CHECK(refused.id == 9);
  CHECK(refused.code == uint16_t(proto::err_code::io));
  // Another server on the path: the first, still running and still holding its lease, writes
  // nothing there (it refuses appends; it would have rolled or checkpointed by name).
  server_process second(data, "[server]\nshards = 1\n");
  REQUIRE(second.start().empty());
  auto w2 = peer{second.connect()};
  auto e2 = epoch_of(w2.hello().grants, 0);
  w2.append(0, e2, 1, {record("second")});
  REQUIRE(w2.wait_durable(0, 1));
  w.append(0, e, 2, {record("first again")}, 10);
  CHECK(w.expect<proto::err>().code == uint16_t(proto::err_code::io));
  f.server.stop();
  second.stop();
  REQUIRE(second.start().empty());
  auto w3 = peer{second.connect()};
  auto e3 = epoch_of(w3.hello().grants, 0);
  auto records = recover_all(w3, 0, e3);
  REQUIRE(records.size() == 1);
  CHECK(records[0] == record("second"));
}
