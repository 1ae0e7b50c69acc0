// Latencies for `fusee load`: an HDR-style histogram (log-linear buckets) whose percentiles are
// within a bounded relative error of the exact ones, at a fixed size whatever the range (1 ns to
// centuries), so recording is O(1) and histograms from several threads merge exactly.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fusee::load {

class latency_histogram {
public:
  /// Values below 2^precision_bits are kept exactly; above, each power of two is split into
  /// 2^precision_bits buckets: a reported percentile is at most 2^-precision_bits above the exact
  /// one (7 bits: 0.79 %), never below it.
  explicit latency_histogram(unsigned precision_bits = 7);

  void record(uint64_t value);
  void merge(const latency_histogram& other);  ///< same precision only
  void clear();

  uint64_t count() const { return count_; }
  uint64_t min() const { return count_ ? min_ : 0; }
  uint64_t max() const { return max_; }
  double mean() const { return count_ ? double(sum_) / double(count_) : 0; }
  /// The smallest recorded-bucket upper bound with at least q·count values at or below it,
  /// clamped to max(); 0 when empty. q in [0, 1].
  uint64_t percentile(double q) const;
  /// The relative error bound: 2^-precision_bits.
  double relative_error() const { return 1.0 / double(uint64_t{1} << bits_); }

private:
  size_t index_of(uint64_t v) const;
  uint64_t upper_bound_of(size_t index) const;

  unsigned bits_;
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0, min_ = 0, max_ = 0;
  unsigned __int128 sum_ = 0;
};

}  // namespace fusee::load
