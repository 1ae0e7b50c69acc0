// The log's settings and what its recovery reports.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/node_settings.hpp"

namespace fusee::server {

struct node_settings;

/// Appends one batch takes at most before the rest waits for the next batch (the batch adds at
/// most one APPEND and small entries to it, well within the format's u32 body length).
inline constexpr uint64_t max_batch_appends_bytes = uint64_t{1} << 30;

struct wal_options {
  std::filesystem::path
      dir;  ///< data dir; the log lives in dir/wal, checkpoints in dir/checkpoints
  uint32_t shards = 0;
  uint64_t segment_bytes = 16ull << 20;  ///< preallocated size; a new segment starts past it
  uint32_t max_read_bytes = 16u << 20;   ///< cap on one RECOVER_LOG page (the first record always)
  /// The appends' bytes one batch takes (at most max_batch_appends_bytes; tests set less).
  uint64_t batch_appends_bytes = max_batch_appends_bytes;
  /// Tests only: the shortest wait of a commit held for the sessions just told DURABLE
  /// (commit_hold.hpp; the server's is the last commit's time, which a test's disk may make µs).
  int64_t hold_min_window_ns = 0;
  /// How often the committer, and the writer thread while the log is idle, check that the data
  /// dir and its segments are still in place (wal_writer.cpp, in_place()); tests set it.
  uint32_t place_check_ms = 1000;

  /// The node's data dir, shard count and segment size.
  static wal_options of(const node_settings& settings);
};

/// What recovery found, for logs and tests.
struct wal_recovery_report {
  uint64_t segments = 0;
  uint64_t batches = 0;
  uint64_t records = 0;
  uint64_t torn_bytes = 0;  ///< dropped from the tail of the last segment
  std::string torn_reason;  ///< names the file and offset
  /// Segments shorter than they were made, each where nothing acknowledged was lost (zeros were
  /// left after its last batch, or the next segment's chain goes on from it): one line each,
  /// naming the file. (One cut where records may be lost refuses the start.)
  std::vector<std::string> cut_short;
};

}  // namespace fusee::server
