// The write-ahead log on its own (no actors): commit-time checks, group commit, I/O failures.
#include <doctest/doctest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <random>

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
  std::vector<std::string> io_failed;
  std::vector<proto::any_message> answers;

  void on_durable(session_id, std::vector<proto::position> p) override {
    std::lock_guard<std::mutex> lk{mtx};
    durable.insert(durable.end(), p.begin(), p.end());
    cv.notify_all();
  }
  void on_refused(session_id, uint64_t id, proto::error e) override {
    std::lock_guard<std::mutex> lk{mtx};
    refused.emplace_back(id, e);
    cv.notify_all();
  }
  void on_granted(std::vector<grant_done> g) override {
    std::lock_guard<std::mutex> lk{mtx};
    granted.insert(granted.end(), g.begin(), g.end());
    cv.notify_all();
  }
  void on_revoked(uint64_t, shard_id, epoch_t) override {}
  void on_answer(session_id, proto::any_message m) override {
    std::lock_guard<std::mutex> lk{mtx};
    answers.push_back(std::move(m));
    cv.notify_all();
  }
  void on_io_failed(session_id, shard_id, epoch_t, std::string m) override {
    std::lock_guard<std::mutex> lk{mtx};
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
                    {proto::bytes(rec.begin(), rec.end())},
                    nullptr};
}

/// Opens the log on `dir` (which must succeed).
std::unique_ptr<wal_writer> open_log(const fs::path& dir, uint32_t shards, wal_sink* sink) {
  auto opened = wal_writer::open(wal_options{dir, shards}, sink);
  REQUIRE_MESSAGE(opened, (opened ? "" : opened.err().message));
  return std::move(*opened);
}

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
  CHECK(wal->recovered_epoch(shard_id{0}) == epoch_t{1});
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

TEST_CASE("a data dir refuses a different shard count") {
  temp_dir tmp;
  recording_sink sink;
  open_log(tmp.path, 4, &sink);
  auto again = wal_writer::open(wal_options{tmp.path, 5}, &sink);
  REQUIRE_FALSE(again);
  CHECK(again.err().message.find("created with 4 shards") != std::string::npos);
}
