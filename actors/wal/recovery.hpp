// Start-up: check the data dir, scan every segment, rebuild each shard's state and index.
//
// Outcomes (docs/operations.md, "Recovery"), each failure a message naming the file (and offset):
// - zeros after the last batch of a segment: its clean end (segments are preallocated);
// - a partial, unreadable or mismatching batch at the end of the last segment, with nothing
//   valid after it: a torn write; it is cut off (zeroed and synced) and reported;
// - the same anywhere else, or followed by a valid batch that could have been written after it
//   (its seq next or later, within the batches that fit between them): acknowledged records may
//   be damaged, so the start is refused;
// - a segment shorter than its extent (the size it was made with; a crash never shortens one):
//   refused when it is the last and no zeros are left after its last batch (the cut may have
//   taken acknowledged batches; a torn end is not cut off then); otherwise reported (cut_short);
// - a batch with a valid checksum that does not follow the one before it (sequence or chain
//   CRC), within a segment or across segments: refused (a batch or a whole segment is missing);
// - a checksummed batch whose body does not parse: refused;
// - segment numbers that are not consecutive (a segment is missing): refused; so is a newest
//   segment found older than fusee.newest names (the last ones are missing);
// - a last segment with a header and nothing else (a crash inside a roll): its snapshot is
//   written now;
// - fusee.meta missing with no segment (a new data dir): it is written; missing while segments
//   exist, foreign, or with another shard count: refused; a file named seg-* that is not
//   seg-<16 hex>.wal, or far larger than a segment: refused; a damaged checkpoint: refused. Other
//   files in the wal dir are left alone (stale *.tmp and *.prep are removed).
#pragma once

#include <vector>

#include "actors/wal/options.hpp"
#include "actors/wal/segments.hpp"
#include "actors/wal/shard_log.hpp"

namespace fusee::server::wal {

struct recovered_log {
  std::vector<shard_log> shards;
  /// The highest epoch reservation found (reserve sections): every grant before this start was
  /// at most this, so every grant now starts above it. 0 in logs without one.
  uint64_t epoch_reserved = 0;
  segment_set segments;  ///< at least one: a new data dir gets its first segment
  wal_recovery_report report;
  file lock;  ///< the data dir's (lock_data_dir), taken before anything in it was read
};

proto::result<recovered_log> recover(const wal_options& opts);

}  // namespace fusee::server::wal
