#include "load/latency_histogram.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace fusee::load {

latency_histogram::latency_histogram(unsigned precision_bits) : bits_(precision_bits) {
  if (bits_ < 1 || bits_ > 16) throw std::invalid_argument("precision_bits must be 1..16");
  // Exact below 2^bits, then (64 - bits) powers of two of 2^bits buckets each.
  counts_.assign((size_t{1} << bits_) * (65 - bits_), 0);
}

size_t latency_histogram::index_of(uint64_t v) const {
  uint64_t linear = uint64_t{1} << bits_;
  if (v < linear) return static_cast<size_t>(v);
  unsigned e = 63u - static_cast<unsigned>(__builtin_clzll(v));  // v's highest bit, >= bits_
  uint64_t sub = (v >> (e - bits_)) - linear;                    // the next bits_ bits
  return static_cast<size_t>(linear + uint64_t{e - bits_} * linear + sub);
}

uint64_t latency_histogram::upper_bound_of(size_t index) const {
  uint64_t linear = uint64_t{1} << bits_;
  if (index < linear) return index;
  uint64_t e = (index - linear) / linear + bits_;
  uint64_t sub = (index - linear) % linear;
  uint64_t shift = e - bits_;
  // The bucket holds [(linear + sub) << shift, ((linear + sub + 1) << shift) - 1].
  unsigned __int128 hi = ((static_cast<unsigned __int128>(linear + sub + 1)) << shift) - 1;
  return hi > UINT64_MAX ? UINT64_MAX : static_cast<uint64_t>(hi);
}

void latency_histogram::record(uint64_t value) {
  counts_[index_of(value)]++;
  if (count_ == 0 || value < min_) min_ = value;
  max_ = std::max(max_, value);
  count_++;
  sum_ += value;
}

void latency_histogram::merge(const latency_histogram& other) {
  if (other.bits_ != bits_) throw std::invalid_argument("merging histograms of other precision");
  if (other.count_ == 0) return;
  for (size_t i = 0; i < counts_.size(); ++i)
    counts_[i] += other.counts_[i];
  min_ = count_ == 0 ? other.min_ : std::min(min_, other.min_);
  max_ = std::max(max_, other.max_);
  count_ += other.count_;
  sum_ += other.sum_;
}

void latency_histogram::clear() {
  std::fill(counts_.begin(), counts_.end(), 0);
  count_ = min_ = max_ = 0;
  sum_ = 0;
}

uint64_t latency_histogram::percentile(double q) const {
  if (count_ == 0) return 0;
  q = std::clamp(q, 0.0, 1.0);
  auto rank = static_cast<uint64_t>(std::ceil(q * double(count_)));
  rank = std::max<uint64_t>(rank, 1);
  uint64_t seen = 0;
  for (size_t i = 0; i < counts_.size(); ++i) {
    seen += counts_[i];
    if (seen >= rank) return std::min(upper_bound_of(i), max_);
  }
  return max_;
}

}  // namespace fusee::load
