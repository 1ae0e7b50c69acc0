// Recovery on crafted bytes: segments, batches and files written with the format's own encoders
// (and then damaged), each case giving the outcome wal/recovery.hpp documents and, when it
// refuses, a message naming the file.
#include <doctest/doctest.h>

#include <fstream>

#include "actors/wal/checkpoints.hpp"
#include "actors/wal/recovery.hpp"
#include "test_util.hpp"

using namespace fusee;
using namespace fusee::server;
using namespace fusee::server::wal;
using fusee::test::temp_dir;

namespace {

byte_view text(std::string_view s) {
  return proto::as_bytes(s);
}

/// A data dir with a fusee.meta for `shards` and an empty wal dir.
struct data_dir {
  temp_dir tmp;
  uint32_t shards;
  explicit data_dir(uint32_t n = 4) : shards(n) {
    fs::create_directories(wal());
    write_text("fusee.meta", encode(meta_file{format_version, n}));
  }
  fs::path wal() const { return tmp.path / "wal"; }
  void write_text(const std::string& name, const std::string& content) const {
    std::ofstream(tmp.path / name, std::ios::binary) << content;
  }
  proto::result<recovered_log> recover() const {
    return wal::recover(wal_options{tmp.path, shards});
  }
  /// Recovery must succeed; returns it (a refusal's message fails the test).
  proto::result<recovered_log> recovered() const {
    auto r = recover();
    REQUIRE_MESSAGE(r, (r ? "" : r.err().message));
    return r;
  }
  /// Recovery must refuse; returns its message.
  std::string refused() const {
    auto r = recover();
    REQUIRE_FALSE(r);
    return r.err().message;
  }
};

/// Writes a segment file batch by batch, chaining them as the writer does.
struct segment_file {
  uint64_t seq;
  bytes data;
  uint64_t next_batch;
  uint32_t prev_crc;
  std::vector<size_t> batch_at;  ///< file offset of each batch

  explicit segment_file(uint64_t s, uint64_t first_batch = 1, uint32_t prev = 0)
      : seq(s), data(encode(segment_header{format_version, s})), next_batch(first_batch),
        prev_crc(prev) {}

  segment_file& batch(std::vector<section> sections) {
    bytes body;
    for (auto& x : sections)
      append_section(body, x);
    auto b = encode_batch(next_batch++, prev_crc, body);
    prev_crc = decode_batch_header(b)->crc;
    batch_at.push_back(data.size());
    data.insert(data.end(), b.begin(), b.end());
    return *this;
  }
  segment_file& raw(const bytes& b) {
    data.insert(data.end(), b.begin(), b.end());
    return *this;
  }
  segment_file& zeros(size_t n) { return raw(bytes(n, 0)); }
  fs::path write(const data_dir& d) const {
    auto path = d.wal() / segment_name(seq);
    REQUIRE(write_file_durably(path, data));
    return path;
  }
};

records_section records(uint32_t shard, uint64_t epoch, uint64_t first,
                        std::vector<std::string_view> recs) {
  records_section r{shard, epoch, first, {}, {}};
  for (auto s : recs)
    r.records.push_back(text(s));
  return r;
}

bytes file_bytes(const fs::path& p) {
  return *read_file(p);
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("recovery rebuilds epochs, LSNs and the index, and zeros after the last batch are the "
          "clean end") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}})
      .batch({grant_section{2, 1}})
      .batch({records(2, 1, 1, {"a", "bb"}), grant_section{3, 4}})
      .batch({records(2, 1, 3, {"ccc"})})
      .zeros(4096);
  seg.write(d);
  auto log = d.recovered();
  CHECK(log->report.batches == 4);
  CHECK(log->report.records == 3);
  CHECK(log->report.torn_bytes == 0);
  CHECK(log->shards[2].epoch.value() == 1);
  CHECK(log->shards[2].last_lsn == 3);
  CHECK(log->shards[2].durable_lsn == 3);
  CHECK(log->shards[3].epoch.value() == 4);
  REQUIRE(log->shards[2].index.size() == 2);
  auto& ref = log->shards[2].index[1];
  auto region = log->segments.read(ref.segment, ref.offset, ref.size);
  REQUIRE(region);
  auto recs = decode_records(*region, ref.count);
  REQUIRE(recs);
  CHECK(bytes(recs->at(0).begin(), recs->at(0).end()) == fusee::test::to_bytes("ccc"));
  CHECK(log->segments.active().size == seg.data.size() - 4096);  // appends go after the batches
}

TEST_CASE("recovery keeps the highest epoch reservation, from any batch or a segment's first") {
  data_dir d;
  segment_file one{1};
  one.batch({snapshot_section{}}).batch({grant_section{0, 1}, reserve_section{1000}});
  one.write(d);
  segment_file two{2, one.next_batch, one.prev_crc};
  two.batch({snapshot_section{{snapshot_entry{0, 1, 0}}}, reserve_section{1000}})
      .batch({reserve_section{5000}})
      .batch({reserve_section{3000}});  // never lower than before
  two.write(d);
  auto log = d.recovered();
  CHECK(log->epoch_reserved == 5000);
  CHECK(log->shards[0].epoch.value() == 1);  // the shard's own, as written
}

TEST_CASE("a torn tail of the last segment is cut off and reported with the file and offset") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}}).batch({records(0, 1, 1, {"kept"})});
  segment_file torn = seg;
  torn.batch({records(0, 1, 2, {"torn write"})});
  size_t tail_at = torn.batch_at.back();
  // Only the first 30 bytes of the last batch reached the disk.
  seg.raw(bytes(torn.data.begin() + static_cast<ptrdiff_t>(tail_at),
                torn.data.begin() + static_cast<ptrdiff_t>(tail_at) + 30))
      .zeros(1000);
  auto path = seg.write(d);
  {
    auto log = d.recovered();
    CHECK(log->report.torn_bytes == 30);
    CHECK(
        contains(log->report.torn_reason, path.string() + " at offset " + std::to_string(tail_at)));
    CHECK(log->shards[0].last_lsn == 1);  // the acknowledged record is there
  }
  // The torn bytes are zeroed on disk: the next start finds a clean end.
  auto after = file_bytes(path);
  CHECK(std::all_of(after.begin() + static_cast<ptrdiff_t>(tail_at), after.end(),
                    [](uint8_t b) { return b == 0; }));
  auto again = d.recovered();
  CHECK(again->report.torn_bytes == 0);
}

TEST_CASE("a last batch with a checksum mismatch and nothing valid after it is a torn write") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}}).batch({records(0, 1, 1, {"kept"})});
  seg.batch({records(0, 1, 2, {"half written"})});
  seg.data[seg.batch_at.back() + 30] ^= 0xFF;
  seg.zeros(512);
  seg.write(d);
  auto log = d.recovered();
  CHECK(contains(log->report.torn_reason, "checksum mismatch"));
  CHECK(log->shards[0].last_lsn == 1);
}

TEST_CASE("damage followed by a valid batch is refused, not cut: acknowledged records would be "
          "lost") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}}).batch({records(0, 1, 1, {"one"})});
  seg.batch({records(0, 1, 2, {"two"})});
  size_t damaged = seg.batch_at.back();
  seg.batch({records(0, 1, 3, {"three"})}).zeros(256);
  seg.data[damaged + 26] ^= 0x01;  // one bit in batch 3's body
  auto path = seg.write(d);
  auto why = d.refused();
  CHECK(contains(why, path.string() + " at offset " + std::to_string(damaged)));
  CHECK(contains(why, "not a torn write"));
}

TEST_CASE("a torn last batch whose record holds a valid batch's bytes is still a torn write") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}}).batch({records(0, 1, 1, {"kept"})});
  // A record that is itself a whole batch (say, a backup of another log's bytes), as batch 1.
  bytes inner_body;
  append_section(inner_body, records(0, 1, 1, {"a batch inside a record"}));
  auto inner = encode_batch(1, 0, inner_body);
  std::string inner_text(inner.begin(), inner.end());
  segment_file torn = seg;
  torn.batch({records(0, 1, 2, {inner_text, "and a record after it"})});
  size_t tail_at = torn.batch_at.back();
  // All but the last 5 bytes of batch 3 reached the disk: the inner batch is whole.
  seg.raw(bytes(torn.data.begin() + static_cast<ptrdiff_t>(tail_at), torn.data.end() - 5))
      .zeros(256);
  seg.write(d);
  auto log = d.recovered();
  CHECK(log->report.torn_bytes > 0);
  CHECK(log->shards[0].last_lsn == 1);
}

TEST_CASE("a valid batch's bytes after a torn tail with a seq too far on to follow it are no "
          "evidence of damage, one that could follow it is") {
  // Batch 3 torn; after it, in its record, a valid batch numbered `inner_seq`. Returns the
  // refusal ("": it started); the log goes before its data dir (its spare is filled in there).
  auto refusal = [](uint64_t inner_seq) -> std::string {
    data_dir d;
    segment_file seg{1};
    seg.batch({snapshot_section{}}).batch({records(0, 1, 1, {"kept"})});
    bytes inner_body;
    append_section(inner_body, records(0, 1, 1, {"a batch inside a record"}));
    auto inner = encode_batch(inner_seq, 0, inner_body);
    segment_file torn = seg;
    torn.batch({records(0, 1, 2, {std::string(inner.begin(), inner.end()), "after it"})});
    seg.raw(bytes(torn.data.begin() + static_cast<ptrdiff_t>(torn.batch_at.back()),
                  torn.data.end() - 5))
        .zeros(256);
    seg.write(d);
    auto log = d.recover();
    return log ? "" : log.err().message;
  };
  // Between batch 3's start and the inner batch there is room for 2 or 3 batches' headers: a
  // batch 4 could be there, a batch 1000 not.
  CHECK(refusal(1000).empty());
  CHECK(contains(refusal(4), "not a torn write"));
}

TEST_CASE("a damaged header of the last segment followed by its first batch is refused") {
  data_dir d;
  segment_file first{1};
  first.batch({snapshot_section{}}).batch({records(0, 1, 1, {"one"})}).zeros(64);
  first.write(d);
  // Segment 2 holds only the batch the chain expects next (3): with the header damaged, that
  // batch is the evidence, though its seq is not later than the expected one.
  segment_file second{2, first.next_batch, first.prev_crc};
  second.batch({snapshot_section{{snapshot_entry{0, 1, 1}}}}).zeros(256);
  second.data[2] ^= 0xFF;  // the header, synced before the segment was renamed into place
  auto path = second.write(d);
  auto why = d.refused();
  CHECK(contains(why, path.string()));
  CHECK(contains(why, "not a torn write"));
}

TEST_CASE("a batch that does not follow the one before it is refused (broken chain), also "
          "across segments") {
  SUBCASE("within a segment") {
    data_dir d;
    segment_file seg{1};
    seg.batch({snapshot_section{}}).batch({records(0, 1, 1, {"one"})});
    seg.prev_crc ^= 1;  // the next batch names the wrong predecessor, with a valid checksum
    seg.batch({records(0, 1, 2, {"two"})});
    auto path = seg.write(d);
    auto why = d.refused();
    CHECK(contains(why, path.string() + " at offset " + std::to_string(seg.batch_at.back())));
    CHECK(contains(why, "does not follow"));
  }
  SUBCASE("across two consecutive segments: a batch is missing") {
    data_dir d;
    segment_file first{1};
    first.batch({snapshot_section{}}).batch({records(0, 1, 1, {"one"})}).zeros(64);
    first.write(d);
    segment_file second{2, first.next_batch + 1, first.prev_crc};  // skips a batch
    second.batch({snapshot_section{{snapshot_entry{0, 1, 1}}}});
    auto path = second.write(d);
    CHECK(contains(d.refused(), path.string()));
  }
  SUBCASE("a whole segment missing in the middle") {
    data_dir d;
    segment_file first{1};
    first.batch({snapshot_section{}}).zeros(64);
    first.write(d);
    segment_file second{2, first.next_batch, first.prev_crc};
    second.batch({snapshot_section{}}).batch({records(0, 1, 1, {"lost"})}).zeros(64);
    segment_file third{3, second.next_batch, second.prev_crc};  // segment 2 is not on disk
    third.batch({snapshot_section{{snapshot_entry{0, 1, 1}}}});
    auto path = third.write(d);
    auto why = d.refused();
    CHECK(contains(why, path.string()));
    CHECK(contains(why, segment_name(2) + " is missing"));
  }
  SUBCASE("a missing segment before one with no batch yet (the chain cannot tell)") {
    data_dir d;
    segment_file first{1};
    first.batch({snapshot_section{}}).batch({records(0, 1, 1, {"r"})}).zeros(64);
    first.write(d);
    segment_file third{3};  // a header only: created, then the crash
    third.zeros(64);
    third.write(d);
    CHECK(contains(d.refused(), segment_name(2) + " is missing"));
  }
  SUBCASE("the oldest segment on disk starts the chain (older ones were retired)") {
    data_dir d;
    segment_file fifth{5, 57, 0x1234};
    fifth.batch({snapshot_section{{snapshot_entry{0, 2, 9}}}}).batch({records(0, 2, 10, {"x"})});
    fifth.write(d);
    segment_file sixth{6, fifth.next_batch, fifth.prev_crc};
    sixth.batch({snapshot_section{{snapshot_entry{0, 2, 10}}}});
    sixth.write(d);
    // (Retirement took records 1-9 once a checkpoint covered them.)
    fs::create_directories(d.tmp.path / "checkpoints");
    REQUIRE(checkpoint_store{d.tmp.path / "checkpoints"}.write(0, 9, text("state")));
    auto log = d.recovered();
    CHECK(log->shards[0].last_lsn == 10);
  }
}

TEST_CASE("records retired from the log with no checkpoint covering them, or a checkpoint past "
          "the log's records, are refused: files were removed, cut or swapped outside the server") {
  data_dir d;
  segment_file fifth{5, 57, 0x1234};  // segments 1-4 retired: shard 0's records 1-9 went with them
  fifth.batch({snapshot_section{{snapshot_entry{0, 2, 9}, snapshot_entry{1, 1, 0}}}})
      .batch({records(0, 2, 10, {"x"}), records(1, 1, 1, {"y"})})
      .zeros(64);
  fifth.write(d);
  fs::create_directories(d.tmp.path / "checkpoints");
  checkpoint_store store{d.tmp.path / "checkpoints"};
  SUBCASE("the checkpoint is missing") {
    auto why = d.refused();
    CHECK(contains(why, "shard 0: its records up to LSN 9 are no longer in the log, and " +
                            store.path(0).string() + " is missing"));
  }
  SUBCASE("the checkpoint is older than the records retired (another shard's, say)") {
    REQUIRE(store.write(0, 7, text("state")));
    CHECK(contains(d.refused(), store.path(0).string() + " covers only up to LSN 7"));
  }
  SUBCASE("a checkpoint covers records the log does not hold (the last segment was removed)") {
    REQUIRE(store.write(0, 9, text("state")));
    REQUIRE(store.write(1, 3, text("state")));
    auto why = d.refused();
    CHECK(contains(why, "shard 1: " + store.path(1).string() +
                            " covers up to LSN 3, but the log holds its records only up to LSN 1"));
  }
  SUBCASE("checkpoints that cover what was retired and no more are taken") {
    REQUIRE(store.write(0, 9, text("state")));
    REQUIRE(store.write(1, 1, text("state")));
    auto log = d.recovered();
    CHECK(log->shards[0].ckpt_lsn == 9);
    CHECK(log->shards[1].ckpt_lsn == 1);
  }
}

TEST_CASE("a last segment emptied or cut to its header outside the server is refused: the log "
          "puts a segment in place only once it is made whole") {
  data_dir d;
  segment_file first{1};
  first.batch({snapshot_section{}}).batch({records(0, 1, 1, {"one"})}).zeros(64);
  first.write(d);
  segment_file second{2, first.next_batch, first.prev_crc};
  second.batch({snapshot_section{{snapshot_entry{0, 1, 1}}}})
      .batch({records(0, 1, 2, {"two"})})
      .zeros(64);
  auto path = second.write(d);
  SUBCASE("emptied") {
    fs::resize_file(path, 0);
  }
  SUBCASE("its header only") {
    fs::resize_file(path, segment_header_size);
  }
  auto why = d.refused();
  CHECK(contains(why, path.string()));
  CHECK(contains(why, "nothing after its header"));
}

TEST_CASE("a last segment shorter than it was made is refused when no zeros are left after its "
          "last batch: a crash never shortens a segment, so records after the cut may be lost") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}, extent_section{4096}})
      .batch({records(0, 1, 1, {"one"})})
      .batch({records(0, 1, 2, {"two"})});
  size_t last_at = seg.batch_at.back();
  size_t end = seg.data.size();
  seg.zeros(4096 - end);
  SUBCASE("cut at the end of a batch: nothing looks torn") {
    seg.data.resize(end);
    auto path = seg.write(d);
    auto why = d.refused();
    CHECK(contains(why, path.string() + ": " + std::to_string(end) +
                            " bytes, but the segment was made with 4096"));
    CHECK(contains(why, "cut short"));
    CHECK(contains(why, "acknowledged records may be lost"));
  }
  SUBCASE("cut inside a batch: refused, not cut off as a torn write") {
    seg.data.resize(last_at + 10);
    auto path = seg.write(d);
    auto why = d.refused();
    CHECK(contains(why, "cut short"));
    CHECK(contains(why, path.string() + " at offset " + std::to_string(last_at) +
                            ": partial batch header"));
    CHECK(file_bytes(path) == seg.data);  // left as found, for inspection
  }
}

TEST_CASE("a segment shorter than it was made starts when the cut took nothing written, and the "
          "report names it") {
  SUBCASE("zeros are left after the last batch") {
    data_dir d;
    segment_file seg{1};
    seg.batch({snapshot_section{}, extent_section{4096}}).batch({records(0, 1, 1, {"one"})});
    seg.zeros(100);  // of the 4096
    auto path = seg.write(d);
    {
      auto log = d.recovered();
      CHECK(log->shards[0].last_lsn == 1);
      REQUIRE(log->report.cut_short.size() == 1);
      CHECK(contains(log->report.cut_short[0], path.string()));
      CHECK(contains(log->report.cut_short[0], "only space after its last batch was cut"));
    }
    // Its zeros are back: batches written after the last one would not end the file, which the
    // next start would take for a cut that took batches.
    CHECK(fs::file_size(path) == 4096);
    auto again = d.recovered();
    CHECK(again->report.cut_short.empty());
  }
  SUBCASE("an older segment whose last batch the next segment's chain goes on from") {
    data_dir d;
    segment_file first{1};
    first.batch({snapshot_section{}, extent_section{8192}}).batch({records(0, 1, 1, {"one"})});
    auto path = first.write(d);
    segment_file second{2, first.next_batch, first.prev_crc};
    second.batch({snapshot_section{{snapshot_entry{0, 1, 1}}}, extent_section{4096}});
    second.zeros(4096 - second.data.size());
    second.write(d);
    auto log = d.recovered();
    CHECK(log->shards[0].last_lsn == 1);
    REQUIRE(log->report.cut_short.size() == 1);
    CHECK(contains(log->report.cut_short[0], path.string()));
  }
  SUBCASE("not when the next segment has no whole batch to show that none is missing") {
    data_dir d;
    segment_file first{1};
    first.batch({snapshot_section{}, extent_section{8192}}).batch({records(0, 1, 1, {"one"})});
    auto path = first.write(d);
    segment_file second{2};  // a header only (a crash in its roll, say): nothing chains on
    second.zeros(4096);
    second.write(d);
    auto why = d.refused();
    CHECK(contains(why, path.string() + ": "));
    CHECK(contains(why, "has no whole batch to show that none is missing"));
  }
  SUBCASE("a segment as long as it was made, or longer (a batch crossed its end), says nothing") {
    data_dir d;
    segment_file seg{1};
    seg.batch({snapshot_section{}, extent_section{64}}).batch({records(0, 1, 1, {"one"})});
    REQUIRE(seg.data.size() > 64);
    seg.write(d);
    auto log = d.recovered();
    CHECK(log->report.cut_short.empty());
  }
}

TEST_CASE("damage in an older segment refuses the start, naming the file") {
  data_dir d;
  segment_file first{1};
  first.batch({snapshot_section{}}).batch({records(1, 1, 1, {"r"})});
  size_t damaged = first.batch_at.back();
  first.data[damaged + batch_header_size + 2] ^= 0x40;
  first.zeros(128);
  auto path = first.write(d);
  segment_file second{2, first.next_batch, first.prev_crc};
  second.batch({snapshot_section{{snapshot_entry{1, 1, 1}}}});
  second.write(d);
  auto why = d.refused();
  CHECK(contains(why, path.string() + " at offset " + std::to_string(damaged)));
  CHECK(contains(why, "not the last segment"));
}

TEST_CASE("a checksummed batch whose body does not parse is refused") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}});
  bytes body{9, 1, 2, 3};  // section tag 9 does not exist
  auto b = encode_batch(seg.next_batch, seg.prev_crc, body);
  size_t at_offset = seg.data.size();
  seg.raw(b);
  auto path = seg.write(d);
  auto why = d.refused();
  CHECK(contains(why, path.string() + " at offset " + std::to_string(at_offset)));
  CHECK(contains(why, "unknown section tag 9"));
  CHECK(contains(why, "a log written by a newer fusee?"));
}

TEST_CASE("records or grants for a shard the data dir does not have are refused") {
  data_dir d{2};
  segment_file seg{1};
  seg.batch({snapshot_section{}}).batch({grant_section{7, 1}});
  auto path = seg.write(d);
  auto why = d.refused();
  CHECK(contains(why, path.string()));
  CHECK(contains(why, "shard 7"));
}

TEST_CASE("a segment whose header names another segment is refused") {
  data_dir d;
  segment_file seg{5};
  seg.batch({snapshot_section{}});
  auto path = d.wal() / segment_name(6);
  REQUIRE(write_file_durably(path, seg.data));
  auto why = d.refused();
  CHECK(contains(why, path.string()));
  CHECK(contains(why, "header says segment 5"));
}

TEST_CASE("a bad or foreign fusee.meta is refused, naming the file") {
  data_dir d;
  auto meta = (d.tmp.path / "fusee.meta").string();
  SUBCASE("another format") {
    d.write_text("fusee.meta", "format=2\nshards=4\n");
    auto why = d.refused();
    CHECK(contains(why, meta));
    CHECK(contains(why, "format 2 is not supported"));
  }
  SUBCASE("not ours") {
    d.write_text("fusee.meta", "<html>hello</html>\n");
    auto why = d.refused();
    CHECK(contains(why, meta));
    CHECK(contains(why, "not key=value"));
  }
  SUBCASE("a value that is not a number") {
    d.write_text("fusee.meta", "format=1\nshards=lots\n");
    CHECK(contains(d.refused(), "`shards` = \"lots\" is not a number"));
  }
  SUBCASE("a missing key") {
    d.write_text("fusee.meta", "format=1\n");
    CHECK(contains(d.refused(), "`shards` is missing"));
  }
  SUBCASE("an unknown key") {
    d.write_text("fusee.meta", "format=1\nshards=4\ncolour=blue\n");
    CHECK(contains(d.refused(), "unknown key `colour`"));
  }
  SUBCASE("another shard count") {
    d.write_text("fusee.meta", "format=1\nshards=8\n");
    CHECK(contains(d.refused(), "created with 8 shards"));
  }
}

TEST_CASE("a new data dir gets its fusee.meta and a first segment") {
  temp_dir tmp;
  auto log = wal::recover(wal_options{tmp.path / "fresh", 3});
  REQUIRE_MESSAGE(log, (log ? "" : log.err().message));
  CHECK(log->segments.count() == 1);
  auto meta = read_file(tmp.path / "fresh" / "fusee.meta");
  REQUIRE(meta);
  CHECK(std::string(meta->begin(), meta->end()) == "format=1\nshards=3\n");
  CHECK(fs::exists(tmp.path / "fresh" / "wal" / segment_name(1)));
}

TEST_CASE("the log names its newest segment once it is in place, and a data dir whose newest "
          "segments are missing is refused, naming the one it lacks") {
  data_dir d{1};
  auto newest = d.tmp.path / "fusee.newest";
  {
    auto log = d.recovered();  // a first segment, named at once
    auto text = read_file(newest);
    REQUIRE(text);
    CHECK(std::string(text->begin(), text->end()) == "segment=00000000000000000001\n");
    REQUIRE(log->segments.roll(snapshot_section{}));
    REQUIRE(log->segments.roll(snapshot_section{}));
    text = read_file(newest);
    CHECK(std::string(text->begin(), text->end()) == "segment=00000000000000000003\n");
  }
  SUBCASE("the last segment deleted") {
    fs::remove(d.wal() / segment_name(3));
    auto why = d.refused();
    CHECK(contains(why, (d.wal() / segment_name(3)).string() +
                            ", the newest segment this log made (" + newest.string() +
                            "), is missing: the newest found is " + segment_name(2)));
  }
  SUBCASE("every segment deleted") {
    for (uint64_t seq = 1; seq <= 3; ++seq)
      fs::remove(d.wal() / segment_name(seq));
    CHECK(contains(d.refused(), "is missing: there is no segment at all"));
  }
  SUBCASE("fusee.newest damaged") {
    d.write_text("fusee.newest", "segment=0\n");
    auto why = d.refused();
    CHECK(contains(why, newest.string()));
    CHECK(contains(why, "segment must be at least 1"));
    CHECK(contains(why, "then remove it to start"));
  }
  SUBCASE("a data dir from before fusee.newest starts and gets one naming its newest segment") {
    fs::remove(newest);
    auto log = d.recovered();
    auto text = read_file(newest);
    REQUIRE(text);
    CHECK(std::string(text->begin(), text->end()) == "segment=00000000000000000003\n");
    REQUIRE(log->segments.roll(snapshot_section{}));
    text = read_file(newest);
    CHECK(std::string(text->begin(), text->end()) == "segment=00000000000000000004\n");
  }
}

TEST_CASE("a segment the log makes records its extent, so a cut in it is found") {
  temp_dir tmp;
  wal_options opts{tmp.path, 2};
  opts.segment_bytes = 64 << 10;
  {
    auto log = wal::recover(opts);
    REQUIRE_MESSAGE(log, (log ? "" : log.err().message));
  }
  auto path = tmp.path / "wal" / segment_name(1);
  auto data = file_bytes(path);
  CHECK(data.size() == opts.segment_bytes);
  auto h = decode_batch_header(byte_view{data}.subspan(segment_header_size));
  REQUIRE(h);
  auto sections =
      decode_sections(byte_view{data}.subspan(segment_header_size + batch_header_size, h->len));
  REQUIRE(sections);
  REQUIRE(std::holds_alternative<extent_section>(sections->back()));
  CHECK(std::get<extent_section>(sections->back()).bytes == opts.segment_bytes);
  // Cut at the end of its first batch: refused.
  fs::resize_file(path, segment_header_size + batch_header_size + h->len);
  auto again = wal::recover(opts);
  REQUIRE_FALSE(again);
  CHECK(contains(again.err().message, "cut short"));
}

TEST_CASE("a file named like a segment that does not parse is refused and other files are left "
          "alone") {
  data_dir d;
  std::ofstream(d.wal() / "notes.txt") << "operator's notes";
  std::ofstream(d.wal() / "seg-00000000000000zz.wal") << "?";
  auto why = d.refused();
  CHECK(contains(why, (d.wal() / "seg-00000000000000zz.wal").string()));
  CHECK(contains(why, "not a segment name"));
  fs::remove(d.wal() / "seg-00000000000000zz.wal");
  CHECK(d.recover());
  CHECK(fs::exists(d.wal() / "notes.txt"));
}

TEST_CASE("a damaged checkpoint file is refused, naming it") {
  data_dir d;
  fs::create_directories(d.tmp.path / "checkpoints");
  checkpoint_store store{d.tmp.path / "checkpoints"};
  REQUIRE(store.write(1, 5, text("state")));
  auto ok = store.read(1);
  REQUIRE(ok);
  REQUIRE(*ok);
  CHECK((*ok)->lsn == 5);
  auto path = store.path(1);
  auto b = file_bytes(path);
  b.back() ^= 1;
  REQUIRE(write_file_durably(path, b));
  auto why = d.refused();
  CHECK(contains(why, path.string()));
  CHECK(contains(why, "checksum mismatch"));
}

TEST_CASE("the fixed header sizes are the ones their descriptions encode") {
  CHECK(encode(segment_header{format_version, 7}).size() == segment_header_size);
  CHECK(encode_batch(1, 0, {}).size() == batch_header_size);
  auto meta = decode_meta(encode(meta_file{format_version, 12}));
  REQUIRE(meta);
  CHECK(meta->shards == 12);
}

TEST_CASE(
    "a batch buffer kept for reuse is let go once it grew past the limit, and kept below it") {
  proto::bytes small(kept_buffer_limit / 2, 1);
  release_if_large(small);
  CHECK(small.size() == kept_buffer_limit / 2);  // untouched
  proto::bytes large;
  large.reserve(kept_buffer_limit + 1);
  release_if_large(large);
  CHECK(large.capacity() == 0);
  std::vector<uint64_t> entries;  // the limit is in bytes, not entries
  entries.reserve(kept_buffer_limit / sizeof(uint64_t) + 1);
  release_if_large(entries);
  CHECK(entries.capacity() == 0);
}

TEST_CASE("a data dir whose fusee.meta is gone but whose segments are there is refused") {
  data_dir d;
  segment_file seg{1};
  seg.batch({snapshot_section{}});
  seg.write(d);
  fs::remove(d.tmp.path / "fusee.meta");
  auto why = d.refused();
  CHECK(contains(why, (d.tmp.path / "fusee.meta").string() + " is missing"));
  CHECK_FALSE(fs::exists(d.tmp.path / "fusee.meta"));  // not guessed
}

TEST_CASE("a last segment with a header and nothing else gets its snapshot at recovery") {
  data_dir d;
  segment_file first{1};
  first.batch({snapshot_section{}}).batch({grant_section{2, 5}, records(2, 5, 1, {"r"})});
  first.zeros(64);
  first.write(d);
  segment_file second{2};  // the crash came between creating it and writing its snapshot
  second.zeros(4096);
  auto path = second.write(d);
  { auto log = d.recovered(); }
  // The segment now starts with a snapshot that carries shard 2's epoch and last LSN, chained to
  // the batch before it.
  auto data = file_bytes(path);
  auto h = decode_batch_header(byte_view{data}.subspan(segment_header_size));
  REQUIRE(h);
  CHECK(h->seq == first.next_batch);
  CHECK(h->prev_crc == first.prev_crc);
  auto sections =
      decode_sections(byte_view{data}.subspan(segment_header_size + batch_header_size, h->len));
  REQUIRE(sections);
  REQUIRE(sections->size() == 2);  // the snapshot and the extent (the file's size now)
  CHECK(std::get<extent_section>(sections->at(1)).bytes == second.data.size());
  auto& snap = std::get<snapshot_section>(sections->at(0));
  REQUIRE(snap.shards.size() == 1);
  CHECK(snap.shards[0].shard == 2);
  CHECK(snap.shards[0].epoch == 5);
  CHECK(snap.shards[0].last_lsn == 1);
  CHECK(d.recover());  // and it recovers again
}

TEST_CASE("a file named like a segment but far larger than any segment is refused") {
  data_dir d;
  auto path = d.wal() / segment_name(1);
  { std::ofstream(path) << ""; }
  fs::resize_file(path, uint64_t{9} << 30);  // sparse: no disk space used
  auto why = d.refused();
  CHECK(contains(why, path.string()));
  CHECK(contains(why, "larger than any segment"));
}

TEST_CASE("a data dir the log creates, the folders in it and the files it creates, are its "
          "owner's only") {
  temp_dir tmp;
  auto dir = tmp.path / "fresh";
  auto log = wal::recover(wal_options{dir, 4});
  REQUIRE_MESSAGE(log, (log ? "" : log.err().message));
  for (auto& d : {dir, dir / "wal", dir / "checkpoints"})
    CHECK_MESSAGE((fs::status(d).permissions() & fs::perms::all) == fs::perms::owner_all, d);
  int files = 0;
  for (auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) {
      ++files;
      CHECK_MESSAGE((e.status().permissions() & (fs::perms::group_all | fs::perms::others_all)) ==
                        fs::perms::none,
                    e.path());
    }
  CHECK(files > 0);  // the lock file and the meta file at least
}

TEST_CASE("in a data dir made before the log (mkdir -p, systemd's StateDirectory=), the folders "
          "the log creates are its owner's only and the data dir keeps its mode") {
  temp_dir tmp;
  auto dir = tmp.path / "made";
  fs::create_directories(dir);
  auto open = fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
              fs::perms::others_read | fs::perms::others_exec;
  fs::permissions(dir, open, fs::perm_options::replace);
  auto log = wal::recover(wal_options{dir, 4});
  REQUIRE_MESSAGE(log, (log ? "" : log.err().message));
  CHECK((fs::status(dir).permissions() & fs::perms::all) == open);
  for (auto& d : {dir / "wal", dir / "checkpoints"})
    CHECK_MESSAGE((fs::status(d).permissions() & fs::perms::all) == fs::perms::owner_all, d);
}
