// One shard's index from LSNs to its records sections on disk: appended at the back as batches
// become durable (and as recovery scans), dropped from the front as checkpoints retire segments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace fusee::server::wal {

/// Where one records section's `(len bytes)*` region sits on disk. (Every APPEND held in the log
/// has one in memory until its segment retires. A 32-byte layout, count and size as u32, was tried
/// in the eighteenth session: 8 bytes less per APPEND, but more CPU per record in 12 of 16 pairs;
/// docs/benchmarks.md.)
struct section_ref {
  uint64_t first_lsn = 0;
  uint32_t count = 0;
  uint64_t segment = 0;  ///< segment seq
  uint64_t offset = 0;   ///< file offset of the first record's length
  uint64_t size = 0;     ///< bytes of the region
};

/// The sections of one shard in first_lsn order (and so in segment order).
///
/// Cost contract: entries live in chunks of chunk_size; only a lone first chunk grows by doubling
/// (up to chunk_size, so a shard with a few sections holds a few entries' worth, and a doubling
/// copies at most chunk_size / 2 of them). Past that, push_back never copies or moves an entry
/// already stored, and drop_through() never does. A plain vector copied a hot shard's whole index
/// into a new allocation at each doubling, on the thread that commits every shard's log: with the
/// new pages faulted in one by one, 3.8 ms as it passed 32,768 sections and 69 ms at 524,288 on
/// this project's VMs (bench/index_growth), a stall of every shard's DURABLE.
class section_index {
public:
  static constexpr size_t chunk_size = 256;  ///< entries per chunk (10 KiB)

  section_index() = default;
  /// The moved-from index is left empty.
  section_index(section_index&& o) noexcept;
  section_index& operator=(section_index&& o) noexcept;
  section_index(const section_index&) = delete;
  section_index& operator=(const section_index&) = delete;

  void push_back(const section_ref& r);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  /// The i-th section still held (0 is the oldest); i < size().
  const section_ref& operator[](size_t i) const {
    size_t at = i + head_;
    return chunks_[at / chunk_size][at % chunk_size];
  }
  const section_ref& front() const { return (*this)[0]; }
  const section_ref& back() const { return (*this)[size_ - 1]; }

  /// The position of the last section whose first_lsn is at most `lsn` (the one holding `lsn`, if
  /// any does); size() if every section starts after it (or none is held).
  size_t find(uint64_t lsn) const;
  /// Drops the sections at the front that lie in segments up to `segment` (retired ones).
  void drop_through(uint64_t segment);

private:
  /// The first position whose section fails `pred` (size() if none does); `pred` holds for a
  /// prefix of the sections.
  size_t first_not(const std::function<bool(const section_ref&)>& pred) const;

  /// Every chunk but the last holds chunk_size entries (the first's leading head_ dropped); a lone
  /// chunk may be smaller (capacity_).
  std::vector<std::unique_ptr<section_ref[]>> chunks_;
  size_t size_ = 0;        ///< entries held (after head_)
  uint32_t head_ = 0;      ///< entries of chunks_[0] already dropped (< chunk_size)
  uint32_t capacity_ = 0;  ///< room in a lone first chunk; chunk_size once there are more
};

}  // namespace fusee::server::wal
