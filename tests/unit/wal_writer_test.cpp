// The write-ahead log on its own (no actors): commit-time checks, group commit, I/O failures.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "actors/wal/format.hpp"
#include "actors/wal/segments.hpp"
#include "actors/wal/wal_writer.hpp"
#include "test_util.hpp"

using namespace fusee;
using namespace fusee::server;
using fusee::test::temp_dir;
namespace fs = std::filesystem;

namespace {

/// Records every report; tests await them with a deadline.
struct recording_sink : wal_sink {
  std::mutex mtx;
  std::condition_variable cv;
  std::vector<proto::position> durable;
  std::vector<std::pair<uint64_t, proto::error>> refused;
  std::vector<grant_done> granted;
  std::vector<std::thread::id> granted_on;  ///< the thread that reported each grant
  std::vector<std::string> io_failed;
  std::vector<std::pair<uint32_t, uint64_t>> io_failed_at;  ///< each IO_FAILED's shard and epoch
  std::vector<proto::any_message> answers;
  /// As reported: "durable S L", "granted S E", "refused ID", "revoked S", "ok ID" (an answer),
  /// "io_failed S".
  std::vector<std::string> events;
  /// Called (on the committing thread, sink locked) with each refused request id / durable
  /// position, before it is recorded.
  std::function<void(uint64_t)> when_refused;
  std::function<void(const proto::position&)> when_durable;

  /// Each DURABLE frame: its session and positions, in the order sent.
  std::vector<std::pair<session_id, std::vector<proto::position>>> durable_frames;

  void on_durable(session_id session, std::vector<proto::position> p) override {
    std::lock_guard<std::mutex> lk{mtx};
    durable_frames.emplace_back(session, p);
    for (auto& x : p)
      if (when_durable) when_durable(x);
    for (auto& x : p)
      events.push_back("durable " + std::to_string(x.shard.value()) + " " +
                       std::to_string(x.lsn.value()));
    durable.insert(durable.end(), p.begin(), p.end());
    cv.notify_all();
  }
  void on_refused(session_id, uint64_t id, proto::error e) override {
    std::lock_guard<std::mutex> lk{mtx};
    if (when_refused) when_refused(id);
    events.push_back("refused " + std::to_string(id));
    refused.emplace_back(id, e);
    cv.notify_all();
  }
  void on_granted(std::vector<grant_done> g) override {
    std::lock_guard<std::mutex> lk{mtx};
    for (auto& x : g)
      events.push_back("granted " + std::to_string(x.shard) + " " + std::to_string(x.epoch));
    granted.insert(granted.end(), g.begin(), g.end());
    granted_on.insert(granted_on.end(), g.size(), std::this_thread::get_id());
    cv.notify_all();
  }
  size_t revoked = 0;
  std::vector<uint64_t> revoked_tokens;      ///< in the order reported
  std::vector<bool> revoked_wrote;           ///< each revocation's `wrote`, in the same order
  size_t revoked_calls = 0;                  ///< on_revoked calls (one per batch with revocations)
  std::vector<std::string> revoke_failures;  ///< each on_revoked call's failure ("" = through)
  void on_revoked(std::vector<revocation_done> rs, std::string failure) override {
    std::lock_guard<std::mutex> lk{mtx};
    revoke_failures.push_back(std::move(failure));
    for (auto& r : rs) {
      events.push_back("revoked " + std::to_string(r.shard));
      revoked_tokens.push_back(r.token);
      revoked_wrote.push_back(r.wrote);
    }
    revoked += rs.size();
    revoked_calls++;
    cv.notify_all();
  }
  void on_answer(session_id, proto::any_message m) override {
    std::lock_guard<std::mutex> lk{mtx};
    if (auto* ok = std::get_if<proto::ok>(&m)) events.push_back("ok " + std::to_string(ok->id));
    answers.push_back(std::move(m));
    cv.notify_all();
  }
  std::vector<std::string> failures;  ///< on_failed's
  void on_failed(std::string failure) override {
    std::lock_guard<std::mutex> lk{mtx};
    failures.push_back(std::move(failure));
    cv.notify_all();
  }
  void on_io_failed(session_id, shard_id s, epoch_t e, std::string m) override {
    std::lock_guard<std::mutex> lk{mtx};
    io_failed_at.emplace_back(s.value(), e.value());
    events.push_back("io_failed " + std::to_string(s.value()));
    io_failed.push_back(std::move(m));
    cv.notify_all();
  }
  template <class Pred>
  bool await(Pred p) {
    std::unique_lock<std::mutex> lk{mtx};
    return cv.wait_for(lk, std::chrono::seconds(10), p);
  }
};

wal_append app(session_id s, uint64_t id, uint32_t shard, uint64_t epoch, uint64_t first,
               std::string rec) {
  return wal_append{s,
                    id,
                    shard_id{shard},
                    epoch_t{epoch},
                    lsn_t{first},
                    append_records::pack({proto::bytes(rec.begin(), rec.end())}),
                    nullptr};
}

/// True if some segment file under `dir` holds `text` (written, synced or not).
bool segments_hold(const fs::path& dir, const std::string& text) {
  for (auto& f : fs::directory_iterator(dir / "wal")) {
    std::ifstream in(f.path(), std::ios::binary);
    std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (all.find(text) != std::string::npos) return true;
  }
  return false;
}

/// Waits until nobody commits, nothing is queued and the writer thread sleeps (whoever committed
/// last has let the role go, and the writer will not take entries enqueued without a wake-up).
bool await_idle(wal_writer& wal) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  for (;;) {
    auto st = wal.get_stats();
    if (!st.committing && st.queued == 0 && st.writer_sleeping) return true;
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
}

/// Opens the log on `dir` (which must succeed).
std::unique_ptr<wal_writer> open_log(const fs::path& dir, uint32_t shards, wal_sink* sink,
                                     uint32_t place_check_ms = 1000) {
  wal_options opts{dir, shards};
  opts.place_check_ms = place_check_ms;
  auto opened = wal_writer::open(opts, sink);
  REQUIRE_MESSAGE(opened, (opened ? "" : opened.err().message));
  return std::move(*opened);
}

/// Shard 0 granted (session 7) on a one-shard log whose segments hold two 1500-byte appends, so
/// a roll comes every few appends.
struct small_segments_log {
  temp_dir tmp;
  recording_sink sink;
  std::unique_ptr<wal_writer> wal;
  uint64_t epoch = 0;
  uint64_t lsn = 0;  ///< the last LSN appended

  small_segments_log() {
    wal_options opts{tmp.path, 1};
    opts.segment_bytes = 4096;
    auto opened = wal_writer::open(opts, &sink);
    REQUIRE(opened);
    wal = std::move(*opened);
    wal->submit(wal_grant{1, 7, shard_id{0}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
    epoch = sink.granted[0].epoch;
  }

  /// Appends 1500-byte records, each durable and the log idle after it, until `done()` holds
  /// (fewer than 10 appends).
  template <class Done>
  void append_until(Done done) {
    while (!done()) {
      ++lsn;
      REQUIRE(lsn < 10);
      wal->submit(app(7, lsn, 0, epoch, lsn, std::string(1500, 'x')));
      REQUIRE(sink.await([&] { return sink.durable.size() == lsn; }));
      REQUIRE(await_idle(*wal));
    }
  }
};

}  // namespace

TEST_CASE("the log checks holder, epoch and LSN at commit") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 2, &sink);
  wal->submit(wal_grant{1, 7, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  CHECK(sink.granted[0].epoch == 1);
  wal->submit(app(7, 1, 0, 1, 1, "ok"));
  wal->submit(app(8, 2, 0, 1, 2, "another session"));
  wal->submit(app(7, 3, 0, 2, 2, "future epoch"));
  wal->submit(app(7, 4, 0, 1, 5, "gap"));
  wal->submit(app(7, 5, 1, 1, 1, "shard not held"));
  REQUIRE(sink.await([&] { return sink.refused.size() == 4 && sink.durable.size() == 1; }));
  CHECK(sink.refused[0].second.code == proto::err_code::not_holder);
  CHECK(sink.refused[1].second.code == proto::err_code::not_holder);
  CHECK(sink.refused[2].second.code == proto::err_code::lsn_gap);
  CHECK(sink.refused[3].second.code == proto::err_code::not_holder);
  CHECK(sink.durable[0].lsn == lsn_t{1});
  // A revoked lease's epoch is stale; a new grant gets a higher epoch and the durable LSN.
  wal->submit(wal_revoke{2, shard_id{0}, epoch_t{1}, 7});
  wal->submit(app(7, 6, 0, 1, 2, "after revoke"));
  wal->submit(wal_grant{3, 9, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.refused.size() == 5 && sink.granted.size() == 2; }));
  CHECK(sink.refused[4].second.code == proto::err_code::stale_epoch);
  CHECK(sink.granted[1].epoch == 2);
  CHECK(sink.granted[1].durable_lsn == 1);
}

TEST_CASE("a failed write is reported, never acknowledged, and the shard refuses appends") {
  temp_dir tmp;
  {
    recording_sink sink;
    auto wal = open_log(tmp.path, 1, &sink);
    wal->submit(wal_grant{1, 7, shard_id{0}});
    wal->submit(app(7, 1, 0, 1, 1, "durable"));
    REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
    wal->inject_write_failure();
    wal->submit(app(7, 2, 0, 1, 2, "lost"));
    REQUIRE(sink.await([&] { return sink.io_failed.size() == 1; }));
    CHECK(sink.io_failed[0].find("Input/output error") != std::string::npos);
    wal->submit(app(7, 3, 0, 1, 2, "refused"));
    REQUIRE(sink.await([&] { return sink.refused.size() == 1; }));
    CHECK(sink.refused[0].second.code == proto::err_code::io);
    CHECK(sink.durable.size() == 1);  // nothing after the failure was acknowledged
  }
  recording_sink sink;
  auto wal = open_log(tmp.path, 1, &sink);
  CHECK(wal->recovered_durable_lsn(shard_id{0}) == lsn_t{1});
  CHECK(wal->recovered_epoch(shard_id{0}) >= epoch_t{1});  // epochs up to it are stale now
}

TEST_CASE("a grant within the epoch reservation on disk is reported without an fdatasync of its "
          "own, and after a restart every grant is above it") {
  temp_dir tmp;
  std::vector<uint64_t> before_restart;
  {
    recording_sink sink;
    auto wal = open_log(tmp.path, 4, &sink);
    // The first grant of a run writes the reservation and waits for it.
    wal->submit(wal_grant{1, 7, shard_id{0}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
    auto after_first = wal->get_stats();
    CHECK(after_first.grants_without_fsync == 0);
    // The next ones are within it and the shards have nothing waiting: no fdatasync at all.
    for (uint32_t s = 1; s < 4; ++s)
      wal->submit(wal_grant{1 + s, 7, shard_id{s}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 4; }));
    auto after = wal->get_stats();
    CHECK(after.fsyncs == after_first.fsyncs);
    CHECK(after.grants_without_fsync == 3);
    for (auto& g : sink.granted)
      before_restart.push_back(g.epoch);
    // Revoked and granted again (after the revocation is through, as the directory does), still
    // without writing: epochs grow within the run.
    wal->submit(wal_revoke{9, shard_id{3}, epoch_t{sink.granted[3].epoch}, 7});
    REQUIRE(sink.await([&] { return sink.revoked == 1; }));
    wal->submit(wal_grant{10, 8, shard_id{3}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 5; }));
    CHECK(sink.granted[4].epoch > sink.granted[3].epoch);
    before_restart.push_back(sink.granted[4].epoch);
    CHECK(wal->get_stats().fsyncs == after_first.fsyncs);
  }  // nothing of the last four grants was written
  recording_sink sink;
  auto wal = open_log(tmp.path, 4, &sink);
  uint64_t highest = *std::max_element(before_restart.begin(), before_restart.end());
  for (uint32_t s = 0; s < 4; ++s) {
    CHECK(wal->recovered_epoch(shard_id{s}).value() >= highest);
    wal->submit(wal_grant{20 + s, 9, shard_id{s}});
  }
  REQUIRE(sink.await([&] { return sink.granted.size() == 4; }));
  for (auto& g : sink.granted)
    CHECK(g.epoch > highest);
  // An epoch of the run before is stale, not unknown.
  wal->submit(app(7, 1, 1, before_restart[1], 1, "from before the restart"));
  REQUIRE(sink.await([&] { return sink.refused.size() == 1; }));
  CHECK(sink.refused[0].second.code == proto::err_code::stale_epoch);
}

TEST_CASE("a grant that writes nothing is made on the asking thread while the log is idle, and "
          "waits its turn behind anything queued") {
  temp_dir tmp;
  recording_sink sink;
  // (No idle check of the data dir, which takes the committer role, in the test's time.)
  auto wal = open_log(tmp.path, 4, &sink, 3'600'000);
  lease_log& leases = *wal;
  auto idle = [&] { return await_idle(*wal); };
  // The first grant of a run writes the reservation: not at once, through the queue.
  CHECK_FALSE(leases.grant_at_once(1, 7, shard_id{0}));
  leases.grant(1, 7, shard_id{0});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  REQUIRE(idle());
  // Within it, with the log idle: reported on this thread before grant() returns, no fdatasync.
  auto before = wal->get_stats();
  REQUIRE(leases.grant_at_once(2, 7, shard_id{1}));
  {
    std::lock_guard<std::mutex> lk{sink.mtx};
    REQUIRE(sink.granted.size() == 2);
    CHECK(sink.granted[1].token == 2);
    CHECK(sink.granted[1].shard == 1);
    CHECK(sink.granted_on[1] == std::this_thread::get_id());
    CHECK(sink.granted_on[0] != std::this_thread::get_id());  // the writer thread's batch
  }
  CHECK(wal->get_stats().fsyncs == before.fsyncs);
  CHECK(wal->get_stats().grants_without_fsync == before.grants_without_fsync + 1);
  // The new holder's append is taken under that epoch, the old epoch of shard 1 would not be.
  wal->submit(app(7, 1, 1, sink.granted[1].epoch, 1, "a"));
  REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
  REQUIRE(idle());
  // With the holder's append and its revocation queued (nobody committing yet), the next grant
  // queues behind them: made at once it would fence the queued append and name LSN 1.
  wal->enqueue(app(7, 2, 1, sink.granted[1].epoch, 2, "b"));
  wal->enqueue(wal_revoke{3, shard_id{1}, epoch_t{sink.granted[1].epoch}, 7});
  CHECK_FALSE(leases.grant_at_once(4, 8, shard_id{1}));
  leases.grant(4, 8, shard_id{1});
  REQUIRE(sink.await([&] { return sink.granted.size() == 3 && sink.revoked == 1; }));
  std::lock_guard<std::mutex> lk{sink.mtx};
  CHECK(sink.refused.empty());
  CHECK(sink.granted[2].token == 4);
  CHECK(sink.granted[2].durable_lsn == 2);
  auto durable_2 = std::find(sink.events.begin(), sink.events.end(), "durable 1 2");
  auto granted = std::find(sink.events.begin(), sink.events.end(),
                           "granted 1 " + std::to_string(sink.granted[2].epoch));
  CHECK(durable_2 < granted);
  CHECK(granted != sink.events.end());
}

TEST_CASE("the epoch reservation survives the retirement of the segment that first held it") {
  temp_dir tmp;
  wal_options opts{tmp.path, 2};
  opts.segment_bytes = 4096;  // a roll every few appends
  uint64_t early_epoch = 0;
  {
    recording_sink sink;
    auto opened = wal_writer::open(opts, &sink);
    REQUIRE(opened);
    auto& wal = *opened;
    wal->submit(wal_grant{1, 7, shard_id{0}});  // writes the reservation in segment 1
    wal->submit(wal_grant{2, 8, shard_id{1}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 2; }));
    uint64_t epoch = sink.granted[0].epoch;
    for (uint64_t lsn = 1; lsn <= 12; ++lsn) {
      wal->submit(app(7, lsn, 0, epoch, lsn, std::string(1500, 'x')));
      REQUIRE(sink.await([&] { return sink.durable.size() == lsn; }));
    }
    wal->submit(wal_checkpoint{7, 100, shard_id{0}, epoch_t{epoch}, lsn_t{12}, {1, 2, 3}});
    REQUIRE(sink.await([&] { return sink.answers.size() == 1; }));
    REQUIRE(wal->get_stats().retired_segments > 0);
    CHECK(wal->get_stats().roll_seconds.count >= wal->get_stats().retired_segments);  // timed
    // Revoked and granted again within the reservation: nothing of it is written.
    wal->submit(wal_revoke{3, shard_id{1}, epoch_t{sink.granted[1].epoch}, 8});
    REQUIRE(sink.await([&] { return sink.revoked == 1; }));
    wal->submit(wal_grant{4, 9, shard_id{1}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 3; }));
    early_epoch = sink.granted[2].epoch;
    CHECK(wal->get_stats().grants_without_fsync >= 1);
  }
  recording_sink sink;
  auto opened = wal_writer::open(opts, &sink);
  REQUIRE(opened);
  (*opened)->submit(wal_grant{5, 10, shard_id{1}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  CHECK(sink.granted[0].epoch > early_epoch);
}

TEST_CASE("a grant of a shard whose records are not durable yet waits for them") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 1, &sink);
  wal->submit(wal_grant{1, 7, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  // The holder's last records, its revocation and the next grant, in one batch: the grant names
  // LSN 2 and may only be reported once LSN 2 is durable.
  std::vector<wal_entry> batch;
  batch.push_back(app(7, 1, 0, sink.granted[0].epoch, 1, "a"));
  batch.push_back(app(7, 2, 0, sink.granted[0].epoch, 2, "b"));
  batch.push_back(wal_revoke{2, shard_id{0}, epoch_t{sink.granted[0].epoch}, 7});
  batch.push_back(wal_grant{3, 8, shard_id{0}});
  wal->submit(std::move(batch));
  REQUIRE(sink.await([&] { return sink.granted.size() == 2; }));
  CHECK(sink.granted[1].durable_lsn == 2);
  std::lock_guard<std::mutex> lk{sink.mtx};
  auto durable = std::find(sink.events.begin(), sink.events.end(), "durable 0 2");
  auto granted = std::find(sink.events.begin(), sink.events.end(),
                           "granted 0 " + std::to_string(sink.granted[1].epoch));
  REQUIRE(durable != sink.events.end());
  CHECK(durable < granted);
}

TEST_CASE("group commit: everything queued while a batch is written shares the next fsync") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 64, &sink);
  std::vector<wal_entry> grants;
  for (uint32_t s = 0; s < 64; ++s)
    grants.push_back(wal_grant{s, 100 + s, shard_id{s}});
  wal->submit(std::move(grants));
  REQUIRE(sink.await([&] { return sink.granted.size() == 64; }));
  auto before = wal->get_stats();
  std::vector<wal_entry> appends;
  for (uint32_t s = 0; s < 64; ++s)
    appends.push_back(app(100 + s, 0, s, 1, 1, "r"));
  wal->submit(std::move(appends));
  REQUIRE(sink.await([&] { return sink.durable.size() == 64; }));
  auto after = wal->get_stats();
  CHECK(after.fsyncs - before.fsyncs == 1);
  CHECK(after.records - before.records == 64);
}

TEST_CASE("a batch tells each session DURABLE once, in session order, naming each of its shards "
          "once, in shard order, at the last LSN the batch appended to it") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 4, &sink);
  std::vector<wal_entry> grants;
  grants.push_back(wal_grant{1, 9, shard_id{0}});
  grants.push_back(wal_grant{2, 5, shard_id{1}});
  grants.push_back(wal_grant{3, 5, shard_id{2}});
  grants.push_back(wal_grant{4, 9, shard_id{3}});
  wal->submit(std::move(grants));
  REQUIRE(sink.await([&] { return sink.granted.size() == 4; }));
  std::map<uint32_t, uint64_t> epoch;
  for (auto& g : sink.granted)
    epoch[g.shard] = g.epoch;
  auto before = wal->get_stats();
  std::vector<wal_entry> batch;
  batch.push_back(app(9, 1, 3, epoch[3], 1, "a"));
  batch.push_back(app(5, 2, 1, epoch[1], 1, "b"));
  batch.push_back(app(9, 3, 0, epoch[0], 1, "c"));
  batch.push_back(app(9, 4, 3, epoch[3], 2, "d"));  // shard 3 again: its DURABLE names LSN 2
  batch.push_back(app(5, 5, 2, epoch[2], 1, "e"));
  wal->submit(std::move(batch));
  REQUIRE(sink.await([&] { return sink.durable_frames.size() >= 2; }));
  CHECK(wal->get_stats().fsyncs - before.fsyncs == 1);  // one batch
  std::lock_guard<std::mutex> lk{sink.mtx};
  REQUIRE(sink.durable_frames.size() == 2);
  auto shown = [](const std::pair<session_id, std::vector<proto::position>>& f) {
    std::string out = std::to_string(f.first) + ":";
    for (auto& p : f.second)
      out += " " + std::to_string(p.shard.value()) + "@" + std::to_string(p.lsn.value());
    return out;
  };
  CHECK(shown(sink.durable_frames[0]) == "5: 1@1 2@1");
  CHECK(shown(sink.durable_frames[1]) == "9: 0@1 3@2");
}

TEST_CASE(
    "a commit after a report waits for the sessions it told DURABLE, so their next appends "
    "share one fdatasync, and anything but an append, or the end of the wait, commits at once") {
  temp_dir tmp;
  recording_sink sink;
  wal_options opts{tmp.path, 3};
  // The hold lasts as long as the last commit took: µs on a fast disk, less than a preemption
  // between the calls below. A 100 ms floor keeps the wait measurable.
  opts.hold_min_window_ns = 100'000'000;
  auto opened = wal_writer::open(opts, &sink);
  REQUIRE(opened);
  auto wal = std::move(*opened);
  wal->submit(wal_grant{1, 7, shard_id{0}});
  wal->submit(wal_grant{2, 8, shard_id{1}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 2; }));
  REQUIRE(await_idle(*wal));
  // A batch told sessions 7 and 8 DURABLE; this thread committed it, as an I/O thread does.
  wal->enqueue(app(7, 1, 0, 1, 1, "a"));
  wal->enqueue(app(8, 1, 1, 1, 1, "b"));
  CHECK(wal->commit() == std::chrono::nanoseconds{0});
  REQUIRE(sink.durable.size() == 2);
  auto before = wal->get_stats();
  wal->enqueue(app(7, 2, 0, 1, 2, "c"));
  auto wait = wal->commit();
  CHECK(wait > std::chrono::nanoseconds{0});
  CHECK(wait <= std::chrono::milliseconds{100});
  CHECK(wal->get_stats().queued == 1);  // held: nothing written
  CHECK(sink.durable.size() == 2);

  SUBCASE("the last session's append ends the wait: one fdatasync for both") {
    wal->enqueue(app(8, 2, 1, 1, 2, "d"));
    CHECK(wal->commit() == std::chrono::nanoseconds{0});
    auto after = wal->get_stats();
    CHECK(sink.durable.size() == 4);
    CHECK(after.fsyncs - before.fsyncs == 1);
    CHECK(after.holds_met - before.holds_met == 1);
    CHECK(after.holds_missed == 0);
  }
  SUBCASE("an append an actor submits wakes the writer thread, which holds nothing") {
    wal->submit(app(7, 3, 2, 0, 1, "unheld"));  // shard 2 is nobody's: refused, at once
    // The held append went with it, durable, the writer holding nothing.
    CHECK(sink.await([&] { return sink.refused.size() == 1 && sink.durable.size() == 3; }));
    CHECK(wal->get_stats().queued == 0);
  }
  SUBCASE("a grant queued is not held, nor the appends before it") {
    wal->enqueue(wal_grant{3, 9, shard_id{2}});
    CHECK(wal->commit() == std::chrono::nanoseconds{0});
    CHECK(sink.durable.size() == 3);
    CHECK(sink.granted.size() == 3);
    CHECK(wal->get_stats().holds_missed == 0);
  }
  SUBCASE("a wait that runs out commits what it held, and counts a miss") {
    // Called again once each wait is up, as the I/O thread does.
    for (int i = 0; wait > std::chrono::nanoseconds{0}; ++i) {
      REQUIRE(i < 100);
      std::this_thread::sleep_for(wait);
      wait = wal->commit();
    }
    CHECK(sink.durable.size() == 3);
    CHECK(wal->get_stats().holds_missed == 1);
  }
}

namespace {

struct two_batches_seen {
  bool second_in_file = false;  ///< batch two's record was in the file at shard 0's DURABLE
  uint64_t syncs_then = 0;      ///< fdatasyncs since batch one was queued, at that DURABLE
  uint64_t syncs = 0;           ///< and at the end
  std::vector<std::string> events;
};

/// Shards 0-2 held by `holders`. Batch one is `first` plus a refused append of session 7 on
/// shard 0 (request 2); that refusal (sent while batch one is written, before its fdatasync)
/// queues `second` after calling `before_second`. This thread commits (as an I/O thread does);
/// the sink's events are taken once `events` were reported, whichever thread committed them.
two_batches_seen two_batches(std::vector<session_id> holders, std::vector<wal_entry> first,
                             std::vector<wal_entry> second, size_t events,
                             std::function<void(wal_writer&)> before_second = {}) {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 3, &sink);
  std::vector<wal_entry> grants;
  for (uint32_t s = 0; s < 3; ++s)
    grants.push_back(wal_grant{s, holders[s], shard_id{s}});
  wal->submit(std::move(grants));
  REQUIRE(sink.await([&] { return sink.granted.size() == 3; }));
  REQUIRE(await_idle(*wal));
  {
    std::lock_guard<std::mutex> lk{sink.mtx};
    sink.events.clear();
  }
  two_batches_seen seen;
  auto before = wal->get_stats().fsyncs;
  sink.when_refused = [&](uint64_t id) {
    if (id != 2) return;
    if (before_second) before_second(*wal);
    for (auto& e : second)
      wal->enqueue(std::move(e));
  };
  sink.when_durable = [&](const proto::position& p) {
    if (p.shard != shard_id{0}) return;
    seen.second_in_file = segments_hold(tmp.path, "second-batch-record");
    seen.syncs_then = wal->get_stats().fsyncs - before;
  };
  for (auto& e : first)
    wal->enqueue(std::move(e));
  wal->enqueue(app(7, 2, 0, 6, 2, "wrong epoch"));
  CHECK(wal->commit() == std::chrono::nanoseconds{0});  // nothing was told DURABLE yet: no hold
  REQUIRE(sink.await([&] { return sink.events.size() >= events; }));
  REQUIRE(await_idle(*wal));
  std::lock_guard<std::mutex> lk{sink.mtx};
  seen.syncs = wal->get_stats().fsyncs - before;
  seen.events = sink.events;
  return seen;
}

/// Batch one's records: session 7 on shard 0 and, if `two`, session 8 on shard 1.
std::vector<wal_entry> first_batch(bool two) {
  std::vector<wal_entry> v;
  v.push_back(app(7, 1, 0, 1, 1, "first-batch-record"));
  if (two) v.push_back(app(8, 1, 1, 1, 1, "first-batch-record"));
  return v;
}

/// Batch two's record (session 7, shard 2) and, with `refused`, a refused append (request 4).
std::vector<wal_entry> second_batch(bool refused) {
  std::vector<wal_entry> v;
  v.push_back(app(7, 3, 2, 1, 1, "second-batch-record"));
  if (refused) v.push_back(app(7, 4, 2, 6, 2, "wrong epoch"));
  return v;
}

using strings = std::vector<std::string>;

}  // namespace

TEST_CASE("a batch's DURABLEs to two sessions go out once the next batch is written, before that "
          "one is synced, and each session still hears its answers in the order it asked") {
  auto seen = two_batches({7, 8, 7}, first_batch(true), second_batch(true), 5);
  CHECK(seen.second_in_file);
  CHECK(seen.syncs_then == 1);  // batch one's, not yet batch two's
  CHECK(seen.syncs == 2);
  CHECK(seen.events ==
        strings{"refused 2", "durable 0 1", "durable 1 1", "refused 4", "durable 2 1"});
}

TEST_CASE("a batch answering one session reports at once, before the next batch is written") {
  auto seen = two_batches({7, 8, 7}, first_batch(false), second_batch(true), 4);
  CHECK_FALSE(seen.second_in_file);
  CHECK(seen.syncs == 2);
  CHECK(seen.events == strings{"refused 2", "durable 0 1", "refused 4", "durable 2 1"});
}

TEST_CASE("when the next batch's write fails, the batch before it is still reported durable, "
          "first") {
  auto seen = two_batches({7, 8, 7}, first_batch(true), second_batch(true), 5,
                          [](wal_writer& w) { w.inject_write_failure(); });
  CHECK(seen.syncs == 1);
  CHECK(seen.events ==
        strings{"refused 2", "durable 0 1", "durable 1 1", "refused 4", "io_failed 2"});
}

TEST_CASE("revocations given to the log together are reported together and in order, and the "
          "deposed holder's next append is refused at commit") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 4, &sink);
  for (uint32_t s = 0; s < 3; ++s)
    wal->submit(wal_grant{1 + s, 7, shard_id{s}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 3; }));
  std::map<uint32_t, uint64_t> epoch;
  for (auto& g : sink.granted)
    epoch[g.shard] = g.epoch;
  lease_log& log = *wal;
  std::vector<revocation> rs;
  for (uint32_t s = 0; s < 3; ++s)
    rs.push_back(revocation{10 + s, shard_id{s}, epoch_t{epoch[s]}, 7});
  log.revoke(std::move(rs));
  wal->submit(app(7, 20, 1, epoch[1], 1, "after its revocation"));
  REQUIRE(sink.await([&] { return sink.revoked == 3 && sink.refused.size() == 1; }));
  CHECK(sink.revoked_calls == 1);
  CHECK(sink.revoked_tokens == std::vector<uint64_t>{10, 11, 12});
  CHECK(sink.revoke_failures == std::vector<std::string>{""});  // through the log
  CHECK(sink.refused[0].first == 20);
  CHECK(sink.refused[0].second.code == proto::err_code::stale_epoch);
}

TEST_CASE("a revocation says whether its lease appended anything, not whether the shard holds "
          "records, and an old epoch's is not known (said as written)") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 4, &sink);
  lease_log& log = *wal;
  wal->submit(wal_grant{1, 7, shard_id{0}});
  wal->submit(wal_grant{2, 7, shard_id{1}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 2; }));
  REQUIRE(sink.granted[0].shard == 0);  // in the order asked
  auto e0 = sink.granted[0].epoch, e1 = sink.granted[1].epoch;
  wal->submit(app(7, 20, 0, e0, 1, "a step"));
  REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
  log.revoke(
      {revocation{10, shard_id{0}, epoch_t{e0}, 7}, revocation{11, shard_id{1}, epoch_t{e1}, 7}});
  REQUIRE(sink.await([&] { return sink.revoked == 2; }));
  CHECK(sink.revoked_wrote == std::vector<bool>{true, false});
  // Shard 0 again, to another worker that writes nothing: its records are from the lease before.
  wal->submit(wal_grant{3, 8, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 3; }));
  log.revoke({revocation{12, shard_id{0}, epoch_t{sink.granted[2].epoch}, 8},
              revocation{13, shard_id{0}, epoch_t{e0}, 7}});  // long over: not known
  REQUIRE(sink.await([&] { return sink.revoked == 4; }));
  CHECK(sink.revoked_wrote == std::vector<bool>{true, false, false, true});
}

TEST_CASE("more entries than one hold of the queue's lock takes are each queued once, in order") {
  constexpr uint32_t n = 4096 * 2 + 3;
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, n, &sink);
  std::vector<wal_entry> grants;
  for (uint32_t s = 0; s < n; ++s)
    grants.emplace_back(wal_grant{1 + s, 7, shard_id{s}});
  wal->submit(std::move(grants));
  REQUIRE(sink.await([&] { return sink.granted.size() == n; }));
  std::vector<uint64_t> tokens;
  std::vector<revocation> rs;
  for (auto& g : sink.granted) {
    tokens.push_back(g.token);
    rs.push_back(revocation{g.token + n, shard_id{g.shard}, epoch_t{g.epoch}, 7});
  }
  std::sort(tokens.begin(), tokens.end());
  CHECK(std::adjacent_find(tokens.begin(), tokens.end()) == tokens.end());  // each once
  static_cast<lease_log&>(*wal).revoke(std::move(rs));
  REQUIRE(sink.await([&] { return sink.revoked == n; }));
  std::vector<uint64_t> expected;
  for (auto& g : sink.granted)
    expected.push_back(g.token + n);
  CHECK(sink.revoked_tokens == expected);
}

TEST_CASE("a grant of a shard revoked earlier in the same batch is written and synced, not made "
          "early") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 4, &sink);
  wal->submit(wal_grant{1, 7, shard_id{1}});  // writes the reservation
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  auto before = wal->get_stats();
  std::vector<wal_entry> batch;                      // queued under one lock: one batch
  batch.emplace_back(wal_grant{2, 7, shard_id{2}});  // settled: made without a sync of its own
  batch.emplace_back(wal_revoke{3, shard_id{1}, epoch_t{sink.granted[0].epoch}, 7});
  batch.emplace_back(wal_grant{4, 8, shard_id{1}});  // behind the revocation: waits for the sync
  wal->submit(std::move(batch));
  REQUIRE(sink.await([&] { return sink.granted.size() == 3 && sink.revoked == 1; }));
  auto after = wal->get_stats();
  CHECK(after.grants_without_fsync == before.grants_without_fsync + 1);
  CHECK(after.fsyncs == before.fsyncs + 1);
  CHECK(sink.granted[2].shard == 1);
  CHECK(sink.granted[2].epoch > sink.granted[0].epoch);
}

TEST_CASE("a grant that writes nothing in the next batch follows the revocation reported by the "
          "batch before it") {
  // Batch one revokes session 8's lease of shard 1; batch two grants shard 1 to session 9 within
  // the reservation (nothing written for it: reported as soon as batch two is written).
  auto first = first_batch(true);
  first.push_back(wal_revoke{20, shard_id{1}, epoch_t{1}, 8});
  std::vector<wal_entry> second;
  second.push_back(wal_grant{21, 9, shard_id{1}});
  for (auto& e : second_batch(false))
    second.push_back(std::move(e));
  auto seen = two_batches({7, 8, 7}, std::move(first), std::move(second), 6);
  CHECK(seen.second_in_file);
  CHECK(seen.events == strings{"refused 2", "durable 0 1", "durable 1 1", "revoked 1",
                               "granted 1 2", "durable 2 1"});
}

TEST_CASE("a checkpoint answered after its batch sees the lease as it was when it was queued, "
          "not the next batch's revocation") {
  // Batch one answers two sessions (so its report could wait) and holds a checkpoint of shard 0;
  // batch two revokes that lease.
  auto first = first_batch(true);
  first.push_back(wal_checkpoint{7, 100, shard_id{0}, epoch_t{1}, lsn_t{1}, {1, 2, 3}});
  std::vector<wal_entry> second;
  second.push_back(wal_revoke{22, shard_id{0}, epoch_t{1}, 7});
  auto seen = two_batches({7, 8, 7}, std::move(first), std::move(second), 5);
  CHECK(seen.events == strings{"refused 2", "durable 0 1", "durable 1 1", "ok 100", "revoked 0"});
}

namespace {

/// Opens a log on a fresh dir with shard 0 held by session 7 and "durable-record" durable at LSN
/// 1; then `fail` submits LSN 2 (holding "failed-record") so that its batch fails, and returns
/// whether IO_FAILED came. Checks that IO_FAILED names `why` and nothing more was acknowledged,
/// then, with the log closed, that no segment holds the failed record and a reopened log
/// recovers LSN 1.
void check_failed_batch_is_not_recovered(
    const std::function<bool(wal_writer&, recording_sink&, const fs::path& dir)>& fail,
    const std::string& why) {
  temp_dir tmp;
  {
    recording_sink sink;
    auto wal = open_log(tmp.path, 1, &sink);
    wal->submit(wal_grant{1, 7, shard_id{0}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
    wal->submit(app(7, 1, 0, 1, 1, "durable-record"));
    REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
    REQUIRE(fail(*wal, sink, tmp.path));
    CHECK(sink.io_failed[0].find(why) != std::string::npos);
    CHECK(sink.durable.size() == 1);
  }
  CHECK_FALSE(segments_hold(tmp.path, "failed-record"));
  CHECK(segments_hold(tmp.path, "durable-record"));
  recording_sink sink;
  auto wal = open_log(tmp.path, 1, &sink);
  CHECK(wal->recovered_durable_lsn(shard_id{0}) == lsn_t{1});
}

}  // namespace

TEST_CASE("records whose fdatasync failed are not recovered after a restart: their session was "
          "told IO_FAILED") {
  check_failed_batch_is_not_recovered(
      [](wal_writer& wal, recording_sink& sink, const fs::path&) {
        wal.inject_sync_failure();  // written into the file, then the fdatasync fails
        wal.submit(app(7, 2, 0, 1, 2, "failed-record"));
        return sink.await([&] { return sink.io_failed.size() == 1; });
      },
      "fdatasync");
}

namespace {

/// A one-shard log whose shard 0 session 7 holds under `epoch`, with `record` durable at LSN 1 and
/// the log idle (so what is enqueued next is one batch when commit() takes it).
struct one_record_log {
  temp_dir tmp;
  recording_sink sink;
  std::unique_ptr<wal_writer> wal;
  uint64_t epoch = 0;

  explicit one_record_log(const std::string& record) {
    wal = open_log(tmp.path, 1, &sink);
    wal->submit(wal_grant{1, 7, shard_id{0}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
    epoch = sink.granted[0].epoch;
    wal->submit(app(7, 1, 0, epoch, 1, record));
    REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
    REQUIRE(await_idle(*wal));
  }
};

}  // namespace

TEST_CASE("a batch whose fdatasync fails tells IO_FAILED once per session and shard, under the "
          "epoch it appended with, refuses its checkpoint, answers its read from what was durable "
          "before it and reports its revocation with the failure, as it does a later one") {
  one_record_log log{"durable-record"};
  auto& [tmp, sink, wal, e] = log;
  wal->inject_sync_failure();
  // One batch: three appends of shard 0, a read and a checkpoint of it, its revocation and a
  // grant of it to session 8 (which makes the shard's epoch e + 1 before the batch fails).
  wal->enqueue(app(7, 2, 0, e, 2, "lost-a"));
  wal->enqueue(app(7, 3, 0, e, 3, "lost-b"));
  wal->enqueue(app(7, 4, 0, e, 4, "lost-c"));
  wal->enqueue(wal_read{7, 5, shard_id{0}, epoch_t{e}, lsn_t{0}, 1 << 20});
  wal->enqueue(wal_checkpoint{7, 6, shard_id{0}, epoch_t{e}, lsn_t{1}, {1, 2, 3}});
  wal->enqueue(wal_load_checkpoint{7, 7, shard_id{0}, epoch_t{e}});
  wal->enqueue(wal_revoke{9, shard_id{0}, epoch_t{e}, 7});
  wal->enqueue(wal_grant{10, 8, shard_id{0}});
  CHECK(wal->commit() == std::chrono::nanoseconds{0});
  REQUIRE(sink.await([&] {
    return sink.answers.size() == 2 && sink.refused.size() == 1 && sink.granted.size() == 2 &&
           sink.revoked == 1;
  }));
  REQUIRE(await_idle(*wal));
  {
    std::lock_guard<std::mutex> lk{sink.mtx};
    CHECK(sink.io_failed_at == std::vector<std::pair<uint32_t, uint64_t>>{{0, e}});
    REQUIRE(sink.failures.size() == 1);  // the directory halts the invoker
    CHECK(sink.failures[0].find("Input/output error") != std::string::npos);
    REQUIRE(sink.revoke_failures.size() == 1);  // the directory keeps the shard busy
    CHECK(sink.revoke_failures[0].find("Input/output error") != std::string::npos);
    CHECK(sink.revoked_tokens == std::vector<uint64_t>{9});
    CHECK(sink.granted[1].epoch == 0);  // not made
    auto* page = std::get_if<proto::log_page>(&sink.answers[0]);
    REQUIRE(page != nullptr);
    CHECK(page->durable_lsn == lsn_t{1});
    REQUIRE(page->records.size() == 1);
    CHECK(std::string(page->records[0].begin(), page->records[0].end()) == "durable-record");
    auto* loaded = std::get_if<proto::checkpoint_data>(&sink.answers[1]);
    REQUIRE(loaded != nullptr);
    CHECK(loaded->lsn == lsn_t{0});  // none was stored
    CHECK(sink.refused[0].first == 6);
    CHECK(sink.refused[0].second.message.find("the log failed") != std::string::npos);
    CHECK(sink.durable.size() == 1);
  }
  // A revocation after the failure is reported with it too (nothing is written for it).
  wal->enqueue(wal_revoke{11, shard_id{0}, epoch_t{e + 1}, 0});
  CHECK(wal->commit() == std::chrono::nanoseconds{0});
  REQUIRE(sink.await([&] { return sink.revoked == 2; }));
  std::lock_guard<std::mutex> lk{sink.mtx};
  REQUIRE(sink.revoke_failures.size() == 2);
  CHECK(sink.revoke_failures[1] == sink.revoke_failures[0]);
  CHECK(sink.failures.size() == 1);  // told once
}

TEST_CASE("a checkpoint, load or read queued before its lease's revocation in the same batch is "
          "served before the revocation is reported, and a checkpoint queued after it is refused") {
  one_record_log log{"record"};
  auto& [tmp, sink, wal, e] = log;
  wal->enqueue(wal_checkpoint{7, 100, shard_id{0}, epoch_t{e}, lsn_t{1}, {1, 2, 3}});
  wal->enqueue(wal_read{7, 101, shard_id{0}, epoch_t{e}, lsn_t{0}, 1 << 20});
  wal->enqueue(wal_load_checkpoint{7, 103, shard_id{0}, epoch_t{e}});
  wal->enqueue(wal_revoke{22, shard_id{0}, epoch_t{e}, 7});
  wal->enqueue(wal_checkpoint{7, 102, shard_id{0}, epoch_t{e}, lsn_t{1}, {4, 5, 6}});
  CHECK(wal->commit() == std::chrono::nanoseconds{0});
  REQUIRE(sink.await(
      [&] { return sink.answers.size() == 3 && sink.refused.size() == 1 && sink.revoked == 1; }));
  std::lock_guard<std::mutex> lk{sink.mtx};
  auto ok = std::find(sink.events.begin(), sink.events.end(), "ok 100");
  auto revoked = std::find(sink.events.begin(), sink.events.end(), "revoked 0");
  std::string all;
  for (auto& x : sink.events)
    all += x + "; ";
  INFO(all);
  CHECK(ok < revoked);  // a RELEASE's OK never comes before the checkpoint queued ahead of it
  CHECK(revoked != sink.events.end());
  CHECK(std::holds_alternative<proto::log_page>(sink.answers[1]));
  auto* loaded = std::get_if<proto::checkpoint_data>(&sink.answers[2]);
  REQUIRE(loaded != nullptr);
  CHECK(loaded->lsn == lsn_t{1});  // the checkpoint just written
  CHECK(sink.refused[0].first == 102);
  CHECK(sink.refused[0].second.code == proto::err_code::stale_epoch);
}

TEST_CASE("a write cut short by the file size limit leaves no part of its batch behind: a batch "
          "whose unwritten tail the segment's zeros would complete does not come back after a "
          "restart") {
  check_failed_batch_is_not_recovered(
      [](wal_writer& wal, recording_sink& sink, const fs::path& dir) {
        REQUIRE(await_idle(wal));
        // The next batch starts where that record ends (its batch has nothing after it). Its
        // record ends in 1,000 zero bytes; the kernel writes it only up to the middle of them
        // (RLIMIT_FSIZE: a short write, then EFBIG), and the preallocated zeros after that are
        // the rest, so the prefix alone would parse as the whole batch, CRC and all.
        const std::string kept = "durable-record";
        fs::path seg;  // the one segment (beside the spare, `next.prep`)
        for (auto& f : fs::directory_iterator(dir / "wal"))
          if (f.path().filename().string().rfind("seg-", 0) == 0) seg = f.path();
        REQUIRE(!seg.empty());
        std::ifstream in(seg, std::ios::binary);
        std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        auto at = all.find(kept);
        REQUIRE(at != std::string::npos);
        uint64_t next_batch = at + kept.size();
        std::string failed = "failed-record" + std::string(1000, '\0');
        // The batch head, then the records section (tag, shard, epoch, first_lsn, count, the
        // record's len), "failed-record", and 500 of its zeros.
        uint64_t limit =
            next_batch + server::wal::batch_header_size + (1 + 4 + 8 + 8 + 4 + 4) + 13 + 500;
        bool reported = false, idle = false;
        {
          // While the cap holds, every write of this process past it fails: the spare segment's
          // zero-filling (std::async, likely still running) loses its file, which the log makes
          // again when it rolls (it does not roll here). Restored on every path out of this
          // scope.
          struct file_size_cap {
            rlimit before{};
            void (*old_handler)(int) = SIG_DFL;
            bool set = false;
            explicit file_size_cap(uint64_t limit) {
              if (getrlimit(RLIMIT_FSIZE, &before) != 0) return;
              old_handler = std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of the signal
              rlimit capped = before;
              capped.rlim_cur = limit;
              set = setrlimit(RLIMIT_FSIZE, &capped) == 0;
            }
            ~file_size_cap() {
              setrlimit(RLIMIT_FSIZE, &before);  // the limit first: no write raises SIGXFSZ then
              std::signal(SIGXFSZ, old_handler);
            }
          } cap{limit};
          REQUIRE(cap.set);
          wal.submit(app(7, 2, 0, 1, 2, failed));
          reported = sink.await([&] { return sink.io_failed.size() == 1; });
          idle = await_idle(wal);
        }
        REQUIRE(idle);
        return reported;
      },
      "File too large");
}

TEST_CASE("a log whose epoch reservation failed to be made durable writes nothing more: no new "
          "reservation in the failed batch's place") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 2, &sink);
  wal->inject_sync_failure();
  wal->submit(wal_grant{1, 7, shard_id{0}});  // a run's first grant writes the reservation
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  CHECK(sink.granted[0].epoch == 0);  // not made
  REQUIRE(await_idle(*wal));
  auto before = wal->get_stats();
  REQUIRE(before.failed);
  wal->submit(wal_grant{2, 8, shard_id{1}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 2; }));
  CHECK(sink.granted[1].epoch == 0);
  REQUIRE(await_idle(*wal));
  auto after = wal->get_stats();
  CHECK(after.fsyncs == before.fsyncs);
  CHECK(after.batches == before.batches);
  CHECK(after.bytes_written == before.bytes_written);
}

TEST_CASE("a log whose segment roll failed does not try again with every later request: the "
          "broken log keeps its segments") {
  small_segments_log log;
  auto& [tmp, sink, wal, epoch, lsn] = log;
  REQUIRE(epoch == 1);
  wal->inject_roll_failure();
  // Each append is durable; the one that fills the segment, too.
  log.append_until([&] { return wal->get_stats().failed; });
  auto before = wal->get_stats();
  CHECK(before.failure.find("roll") != std::string::npos);
  for (uint64_t i = 1; i <= 3; ++i) {
    wal->submit(app(7, 100 + i, 0, epoch, lsn + i, "refused"));
    REQUIRE(sink.await([&] { return sink.refused.size() == i; }));
    CHECK(sink.refused.back().second.message.find("the log failed earlier") != std::string::npos);
  }
  REQUIRE(await_idle(*wal));
  auto after = wal->get_stats();
  CHECK(after.segments == before.segments);
  CHECK(after.fsyncs == before.fsyncs);
  CHECK(after.batches == before.batches);
  std::lock_guard<std::mutex> lk{sink.mtx};
  REQUIRE(sink.failures.size() == 1);
  CHECK(sink.failures[0] == before.failure);
}

TEST_CASE("a spare whose background zero-fill failed is filled by the roll, the log goes on and "
          "the first error is kept in its stats") {
  small_segments_log log;
  auto& [tmp, sink, wal, epoch, lsn] = log;
  CHECK(wal->get_stats().spare_failures == 0);
  wal->inject_spare_failure();
  auto segments = wal->get_stats().segments;
  log.append_until([&] { return wal->get_stats().segments != segments; });  // the next roll
  auto s = wal->get_stats();
  CHECK_FALSE(s.failed);
  CHECK(s.spare_failures == 1);
  CHECK(s.spare_failure.find("zero-fill") != std::string::npos);
  CHECK(s.spare_failure.find("(injected)") != std::string::npos);
  wal->submit(app(7, 100, 0, epoch, lsn + 1, "after the roll"));  // the new segment takes it
  REQUIRE(sink.await([&] { return sink.durable.size() == lsn + 1; }));
}

TEST_CASE("a spare whose background zero-fill failed is counted after the next commit, before "
          "the roll that must fill one itself") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 1, &sink);
  wal->submit(wal_grant{1, 7, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  auto epoch = sink.granted[0].epoch;
  wal->inject_spare_failure();
  CHECK(wal->get_stats().spare_failures == 0);
  wal->submit(app(7, 1, 0, epoch, 1, "r"));
  REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
  REQUIRE(await_idle(*wal));
  auto s = wal->get_stats();
  CHECK(s.spare_failures == 1);
  CHECK_MESSAGE(s.spare_failure.find("next.prep") != std::string::npos, s.spare_failure);
  CHECK(s.segments == 1);  // no roll yet (16 MiB segments)
  CHECK_FALSE(s.failed);
}

TEST_CASE("a background zero-fill that fails on its own (its file cannot be made) is found by the "
          "next look, once, with its error") {
  temp_dir tmp;
  // next.prep cannot be made: a directory with something in it holds the name.
  fs::create_directories(tmp.path / "next.prep" / "x");
  wal::segment_set set{tmp.path, 64 << 10};
  REQUIRE(set.start());
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool found = false;
  while (!found && std::chrono::steady_clock::now() < until) {
    found = set.spare_fill_failed();
    if (!found) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // polled, as commits do
  }
  REQUIRE(found);
  CHECK(set.spare_failures() == 1);
  CHECK_MESSAGE(set.spare_failure().find("next.prep") != std::string::npos, set.spare_failure());
  CHECK_FALSE(set.spare_fill_failed());  // counted once
  CHECK(set.spare_failures() == 1);
}

TEST_CASE("a checkpoint that cannot be stored is refused, counted with its error, and leaves no "
          "temporary file") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 2, &sink);
  wal->submit(wal_grant{1, 7, shard_id{1}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  auto e = sink.granted[0].epoch;
  wal->submit(app(7, 1, 1, e, 1, "r"));
  REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
  // Its place is taken (a directory with something in it): the rename into place fails.
  fs::create_directories(tmp.path / "checkpoints" / "shard-1.ckpt" / "x");
  wal->submit(wal_checkpoint{7, 50, shard_id{1}, epoch_t{e}, lsn_t{1}, {1, 2, 3}});
  REQUIRE(sink.await([&] { return sink.refused.size() == 1; }));
  CHECK(sink.refused[0].first == 50);
  auto s = wal->get_stats();
  CHECK(s.checkpoint_failures == 1);
  CHECK_MESSAGE(s.checkpoint_failure.find("shard-1.ckpt") != std::string::npos,
                s.checkpoint_failure);
  CHECK(s.checkpoints == 0);
  CHECK_FALSE(fs::exists(tmp.path / "checkpoints" / "shard-1.ckpt.tmp"));
  CHECK_FALSE(s.failed);  // the log goes on
}

TEST_CASE("a data dir refuses a different shard count") {
  temp_dir tmp;
  recording_sink sink;
  open_log(tmp.path, 4, &sink);
  auto again = wal_writer::open(wal_options{tmp.path, 5}, &sink);
  REQUIRE_FALSE(again);
  CHECK(again.err().message.find("created with 4 shards") != std::string::npos);
}

TEST_CASE("packed records keep their order and bytes, and a move keeps their views valid") {
  std::vector<proto::bytes> in{proto::bytes{1, 2}, proto::bytes{}, proto::bytes(200, 7)};
  auto packed = append_records::pack(in);
  auto* storage = packed.storage.data();
  append_records moved = std::move(packed);
  CHECK(moved.storage.data() == storage);  // the views still point into it
  REQUIRE(moved.size() == 3);
  for (size_t i = 0; i < in.size(); ++i)
    CHECK(proto::bytes(moved.views[i].begin(), moved.views[i].end()) == in[i]);
}

TEST_CASE(
    "appends queued beyond a batch's byte limit wait for the next batch, in order, each batch "
    "durable on its own") {
  temp_dir tmp;
  recording_sink sink;
  wal_options opts{tmp.path, 1};
  opts.batch_appends_bytes = 1000;
  auto opened = wal_writer::open(opts, &sink);
  REQUIRE(opened);
  auto& wal = *opened;
  wal->submit(wal_grant{1, 7, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  uint64_t epoch = sink.granted[0].epoch;
  REQUIRE(await_idle(*wal));
  auto before = wal->get_stats();
  std::vector<wal_entry> appends;  // queued under one hold of the lock: one batch without a limit
  for (uint64_t lsn = 1; lsn <= 8; ++lsn)
    appends.push_back(app(7, lsn, 0, epoch, lsn, std::string(400, char('a' + lsn))));
  wal->submit(std::move(appends));
  REQUIRE(sink.await([&] { return !sink.durable.empty() && sink.durable.back().lsn == lsn_t{8}; }));
  // 400 + 400 + 400 reaches 1000: three appends a batch, then three, then two
  std::vector<uint64_t> told;
  {
    std::lock_guard<std::mutex> lk{sink.mtx};
    for (auto& p : sink.durable)
      told.push_back(p.lsn.value());
    CHECK(sink.refused.empty());
  }
  CHECK(told == std::vector<uint64_t>{3, 6, 8});
  CHECK(wal->get_stats().fsyncs - before.fsyncs == 3);
  wal.reset();
  recording_sink again;  // every record is recovered, in order
  auto reopened = wal_writer::open(opts, &again);
  REQUIRE(reopened);
  (*reopened)->submit(wal_grant{2, 8, shard_id{0}});
  REQUIRE(again.await([&] { return again.granted.size() == 1; }));
  (*reopened)->submit(
      wal_read{8, 50, shard_id{0}, epoch_t{again.granted[0].epoch}, lsn_t{0}, 1 << 20});
  REQUIRE(again.await([&] { return again.answers.size() == 1; }));
  auto* page = std::get_if<proto::log_page>(&again.answers[0]);
  REQUIRE(page != nullptr);
  REQUIRE(page->records.size() == 8);
  for (uint64_t i = 0; i < 8; ++i)
    CHECK(page->records[i] == proto::bytes(400, uint8_t('a' + i + 1)));
}

TEST_CASE("a read of many empty records is paged by their number too, so that the worker's "
          "decoder takes each page, and the next read goes on where the page ended") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 1, &sink);
  wal->submit(wal_grant{1, 7, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  auto e = sink.granted[0].epoch;
  // 5,000 empty records in two APPENDs (each within the decoder's 4,096).
  for (uint64_t first : {uint64_t{1}, uint64_t{2501}})
    wal->submit(wal_append{7, first, shard_id{0}, epoch_t{e}, lsn_t{first},
                           append_records::pack(std::vector<proto::bytes>(2500)), nullptr});
  REQUIRE(
      sink.await([&] { return !sink.durable.empty() && sink.durable.back().lsn == lsn_t{5000}; }));
  wal->submit(wal_read{7, 9, shard_id{0}, epoch_t{e}, lsn_t{0}, 1 << 20});
  REQUIRE(sink.await([&] { return sink.answers.size() == 1; }));
  auto page = std::get<proto::log_page>(sink.answers[0]);
  CHECK(page.records.size() == 4096);  // proto::max_list_records of an empty page's bytes
  CHECK(page.more == 1);
  auto frame = proto::encode(page);  // as the worker reads it
  CHECK(proto::decode_response(frame[4], proto::byte_view{frame}.subspan(proto::frame_header_size))
            .has_value());
  wal->submit(wal_read{7, 10, shard_id{0}, epoch_t{e}, lsn_t{4096}, 1 << 20});
  REQUIRE(sink.await([&] { return sink.answers.size() == 2; }));
  auto rest = std::get<proto::log_page>(sink.answers[1]);
  CHECK(rest.first_lsn == lsn_t{4097});
  CHECK(rest.records.size() == 5000 - 4096);
  CHECK(rest.more == 0);
}

TEST_CASE("a checkpoint below the shard's checkpoint is refused: the records between them may be "
          "retired, and the one on disk stays") {
  temp_dir tmp;
  recording_sink sink;
  auto wal = open_log(tmp.path, 1, &sink);
  wal->submit(wal_grant{1, 7, shard_id{0}});
  REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
  epoch_t e{sink.granted[0].epoch};
  wal->submit(app(7, 1, 0, e.value(), 1, "one"));
  wal->submit(app(7, 2, 0, e.value(), 2, "two"));
  REQUIRE(sink.await([&] { return !sink.durable.empty() && sink.durable.back().lsn == lsn_t{2}; }));
  wal->submit(wal_checkpoint{7, 100, shard_id{0}, e, lsn_t{2}, {2}});
  REQUIRE(sink.await([&] { return sink.answers.size() == 1; }));
  wal->submit(wal_checkpoint{7, 101, shard_id{0}, e, lsn_t{1}, {1}});
  REQUIRE(sink.await([&] { return sink.refused.size() == 1; }));
  CHECK(sink.refused[0].first == 101);
  CHECK(sink.refused[0].second.code == proto::err_code::bad_body);
  CHECK(sink.refused[0].second.message ==
        "checkpoint lsn 1 is below the shard's checkpoint at LSN 2 (a checkpoint never goes back)");
  wal->submit(wal_checkpoint{7, 102, shard_id{0}, e, lsn_t{2}, {22}});  // the same LSN again: fine
  REQUIRE(sink.await([&] { return sink.answers.size() == 2; }));
  wal.reset();
  recording_sink again;
  auto reopened = open_log(tmp.path, 1, &again);
  reopened->submit(wal_grant{2, 8, shard_id{0}});
  REQUIRE(again.await([&] { return again.granted.size() == 1; }));
  reopened->submit(wal_load_checkpoint{8, 103, shard_id{0}, epoch_t{again.granted[0].epoch}});
  REQUIRE(again.await([&] { return again.answers.size() == 1; }));
  auto* loaded = std::get_if<proto::checkpoint_data>(&again.answers[0]);
  REQUIRE(loaded != nullptr);
  CHECK(loaded->lsn == lsn_t{2});
  CHECK(loaded->data == proto::bytes{22});
}

TEST_CASE("once the log failed, the holder's append is refused with the failure, anyone else's "
          "with the lease rule, as before it") {
  one_record_log log{"durable-record"};
  auto& [tmp, sink, wal, e] = log;
  wal->inject_sync_failure();
  wal->submit(app(7, 2, 0, e, 2, "lost"));
  REQUIRE(sink.await([&] { return !sink.io_failed.empty(); }));
  wal->submit(app(7, 3, 0, e, 2, "the holder"));
  wal->submit(app(9, 4, 0, e, 2, "another connection"));
  wal->submit(app(7, 5, 0, e + 1, 2, "an epoch never granted"));
  wal->submit(app(7, 6, 3, e, 1, "no such shard"));
  REQUIRE(sink.await([&] { return sink.refused.size() == 4; }));
  std::lock_guard<std::mutex> lk{sink.mtx};
  CHECK(sink.refused[0].second.code == proto::err_code::io);
  CHECK(sink.refused[1].second.code == proto::err_code::not_holder);
  CHECK(sink.refused[2].second.code == proto::err_code::not_holder);
  CHECK(sink.refused[3].second.code == proto::err_code::not_holder);
  CHECK(sink.refused[3].second.message == "no shard 3 (this server has 1)");
}

namespace {

/// Shard 0 of a one-shard log in `tmp`/data, granted to session 7, with one durable record; the
/// log idle after it. Segments hold two 1500-byte appends (`small`) or the default size.
struct log_in_data_dir {
  temp_dir tmp;
  fs::path dir = tmp.path / "data";
  recording_sink sink;
  std::unique_ptr<wal_writer> wal;
  uint64_t epoch = 0;

  /// `place_check_ms`: as wal_options'.
  explicit log_in_data_dir(bool small = false, uint32_t place_check_ms = 1000) {
    wal_options opts{dir, 1};
    if (small) opts.segment_bytes = 4096;
    opts.place_check_ms = place_check_ms;
    auto opened = wal_writer::open(opts, &sink);
    REQUIRE_MESSAGE(opened, (opened ? "" : opened.err().message));
    wal = std::move(*opened);
    wal->submit(wal_grant{1, 7, shard_id{0}});
    REQUIRE(sink.await([&] { return sink.granted.size() == 1; }));
    epoch = sink.granted[0].epoch;
    wal->submit(app(7, 1, 0, epoch, 1, "acknowledged"));
    REQUIRE(sink.await([&] { return sink.durable.size() == 1; }));
    REQUIRE(await_idle(*wal));
  }

  /// Moves the data dir away and puts a new one with another lock file where it was, as another
  /// server started on the same path would.
  fs::path replace_dir() {
    auto moved = tmp.path / "moved";
    fs::rename(dir, moved);
    fs::create_directories(dir);
    std::ofstream(dir / "fusee.lock") << "4242\n";
    return moved;
  }

  /// The names in the data dir.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (auto& e : fs::directory_iterator(dir))
      out.push_back(e.path().filename().string());
    return out;
  }
};

}  // namespace

TEST_CASE("a batch written after its segment was deleted is not acknowledged: its append hears "
          "IO_FAILED naming the file and the log fails") {
  log_in_data_dir log{false, 3'600'000};  // no periodic check in the test's time
  fs::remove_all(log.dir / "wal");        // the lock stays: only the batch's own check can tell
  log.wal->submit(app(7, 2, 0, log.epoch, 2, "written to a file with no name"));
  REQUIRE(log.sink.await([&] { return log.sink.io_failed.size() == 1; }));
  CHECK_MESSAGE(log.sink.io_failed[0].find("was deleted while the server ran") != std::string::npos,
                log.sink.io_failed[0]);
  CHECK(log.sink.durable.size() == 1);
  CHECK(log.wal->failure().find("was deleted") != std::string::npos);
}

TEST_CASE("a data dir moved away under an idle log fails the log within seconds, naming the "
          "lock file, and moved back it recovers every acknowledged record") {
  log_in_data_dir log;
  auto moved = log.tmp.path / "moved";
  fs::rename(log.dir, moved);
  REQUIRE(log.sink.await([&] { return !log.sink.failures.empty(); }));
  CHECK_MESSAGE(log.sink.failures[0].find("fusee.lock is gone") != std::string::npos,
                log.sink.failures[0]);
  log.wal->submit(app(7, 2, 0, log.epoch, 2, "refused"));
  REQUIRE(log.sink.await([&] { return log.sink.refused.size() == 1; }));
  CHECK(log.sink.refused[0].second.code == proto::err_code::io);
  CHECK_FALSE(fs::exists(log.dir));  // nothing was made where it was
  log.wal.reset();
  fs::rename(moved, log.dir);
  recording_sink again;
  auto reopened = open_log(log.dir, 1, &again);
  CHECK(reopened->recovered_durable_lsn(shard_id{0}) == lsn_t{1});
}

TEST_CASE("a checkpoint after the data dir was replaced is refused and writes nothing into the "
          "new one") {
  log_in_data_dir log;
  log.replace_dir();
  log.wal->submit(wal_checkpoint{7, 50, shard_id{0}, epoch_t{log.epoch}, lsn_t{1}, {1, 2, 3}});
  REQUIRE(log.sink.await([&] { return log.sink.refused.size() == 1; }));
  CHECK(log.sink.refused[0].first == 50);
  CHECK_MESSAGE(log.sink.refused[0].second.message.find("fusee.lock is another file") !=
                    std::string::npos,
                log.sink.refused[0].second.message);
  CHECK(log.names() == std::vector<std::string>{"fusee.lock"});
  CHECK(log.wal->get_stats().failed);
}

TEST_CASE("a segment roll after the data dir was replaced fails the log and makes no segment in "
          "the new one") {
  log_in_data_dir log{true};
  log.replace_dir();
  // 1500-byte records fill the segment (in the moved dir, where they are acknowledged); the roll
  // after them would make the next segment by name.
  for (uint64_t lsn = 2; lsn <= 4; ++lsn)
    log.wal->submit(app(7, lsn, 0, log.epoch, lsn, std::string(1500, 'x')));
  REQUIRE(log.sink.await([&] { return !log.sink.failures.empty(); }));
  CHECK_MESSAGE(log.sink.failures[0].find("fusee.lock is another file") != std::string::npos,
                log.sink.failures[0]);
  CHECK(log.names() == std::vector<std::string>{"fusee.lock"});
}

TEST_CASE("an older segment deleted under a running log fails the log at the next periodic check") {
  log_in_data_dir log{true, 50};
  // 1500-byte records: the segment rolls, and the first one is no longer the active one.
  for (uint64_t lsn = 2; lsn <= 4; ++lsn) {
    log.wal->submit(app(7, lsn, 0, log.epoch, lsn, std::string(1500, 'x')));
    REQUIRE(log.sink.await([&] { return log.sink.durable.size() == lsn; }));
  }
  REQUIRE(log.wal->get_stats().segments >= 2);
  fs::remove(log.dir / "wal" / wal::segment_name(1));
  REQUIRE(log.sink.await([&] { return !log.sink.failures.empty(); }));
  CHECK_MESSAGE(log.sink.failures[0].find(wal::segment_name(1) + " was deleted") !=
                    std::string::npos,
                log.sink.failures[0]);
}

TEST_CASE("a segment set whose directory was moved makes, renames and removes its files in it, not "
          "where it was") {
  temp_dir tmp;
  auto dir = tmp.path / "wal";
  auto moved = tmp.path / "moved";
  fs::create_directories(dir);
  {
    wal::segment_set set{dir, 64 << 10};
    REQUIRE(set.start());
    REQUIRE(set.roll(wal::snapshot_section{}));
    fs::rename(dir, moved);
    fs::create_directories(dir);  // another server's, say
    REQUIRE(set.roll(wal::snapshot_section{}));
    CHECK(set.retire([](const wal::segment&) { return true; }) == std::vector<uint64_t>{1});
    CHECK(fs::is_empty(dir));
    CHECK(fs::exists(moved / wal::segment_name(2)));
    CHECK_FALSE(fs::exists(moved / wal::segment_name(1)));
  }  // (the next spare's fill is waited for)
  CHECK(fs::is_empty(dir));
  CHECK(fs::exists(moved / "next.prep"));
}

TEST_CASE("an older segment deleted while segments roll more than once per check is still found "
          "by the periodic check: a roll's own look at the data dir does not put it off") {
  log_in_data_dir log{true, 50};
  uint64_t lsn = 1;
  auto append = [&] {
    ++lsn;
    log.wal->submit(app(7, lsn, 0, log.epoch, lsn, std::string(1500, 'x')));
    REQUIRE(log.sink.await([&] {
      return log.sink.durable.size() + log.sink.io_failed.size() + log.sink.refused.size() ==
             lsn;  // (LSN 1 was durable before)
    }));
  };
  while (log.wal->get_stats().segments < 3)
    append();
  fs::remove(log.dir / "wal" / wal::segment_name(1));
  // Every second append rolls: far more often than the 50 ms check, for 10 s at most.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (log.wal->failure().empty() && std::chrono::steady_clock::now() < until)
    append();
  CHECK_MESSAGE(log.wal->failure().find(wal::segment_name(1) + " was deleted") != std::string::npos,
                log.wal->failure());
}

TEST_CASE("wal/ moved away and replaced under a running log fails the log, naming it") {
  log_in_data_dir log{false, 50};
  fs::rename(log.dir / "wal", log.dir / "wal.old");
  fs::create_directories(log.dir / "wal");
  REQUIRE(log.sink.await([&] { return !log.sink.failures.empty(); }));
  CHECK_MESSAGE(log.sink.failures[0].find("is no longer the directory this server opened "
                                          "(another one is there") != std::string::npos,
                log.sink.failures[0]);
}

TEST_CASE("fusee.newest deleted under a running log is made again at the next roll") {
  log_in_data_dir log{true};
  auto newest = log.dir / "fusee.newest";
  REQUIRE(fs::exists(newest));
  fs::remove(newest);
  uint64_t segments = log.wal->get_stats().segments;
  for (uint64_t lsn = 2; log.wal->get_stats().segments == segments; ++lsn) {
    REQUIRE(lsn < 10);
    log.wal->submit(app(7, lsn, 0, log.epoch, lsn, std::string(1500, 'x')));
    REQUIRE(log.sink.await([&] { return log.sink.durable.size() == lsn; }));
    REQUIRE(await_idle(*log.wal));
  }
  auto text = wal::read_file(newest);
  REQUIRE(text);
  CHECK(std::string(text->begin(), text->end()) ==
        wal::encode(wal::newest_file{log.wal->get_stats().segments}));
}

TEST_CASE("a checkpoint load after the data dir was replaced is refused, not read from the new "
          "one") {
  log_in_data_dir log;
  log.wal->submit(wal_checkpoint{7, 50, shard_id{0}, epoch_t{log.epoch}, lsn_t{1}, {1, 2, 3}});
  REQUIRE(log.sink.await([&] { return log.sink.answers.size() == 1; }));
  auto moved = log.replace_dir();
  fs::create_directories(log.dir / "checkpoints");
  fs::copy_file(moved / "checkpoints" / "shard-0.ckpt", log.dir / "checkpoints" / "shard-0.ckpt");
  log.wal->submit(wal_load_checkpoint{7, 51, shard_id{0}, epoch_t{log.epoch}});
  REQUIRE(log.sink.await([&] { return log.sink.refused.size() == 1; }));
  CHECK(log.sink.refused[0].first == 51);
  CHECK_MESSAGE(log.sink.refused[0].second.message.find("fusee.lock is another file") !=
                    std::string::npos,
                log.sink.refused[0].second.message);
  CHECK(log.sink.answers.size() == 1);  // no CHECKPOINT_DATA
}
