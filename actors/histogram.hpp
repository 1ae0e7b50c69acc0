// Latency and size distributions for introspection and /metrics: fixed bucket bounds (so series
// from different scrapes and nodes add up), a plain value to send in messages, and a recorder
// that one thread writes and any thread reads. No CAF (its inspect() is in inspect/stats.hpp).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace fusee::server {

/// Cumulative-free bucket counts: counts[i] observations were <= bounds[i] (and above the
/// previous bound); the last count is above every bound. `sum` is in the bounds' unit.
struct histogram {
  std::string name;  ///< metric name without the fusee_ prefix, with its unit (e.g. fsync_seconds)
  std::vector<double> bounds;
  std::vector<uint64_t> counts;  ///< bounds.size() + 1 entries
  uint64_t count = 0;
  double sum = 0;

  histogram() = default;
  histogram(std::string n, std::vector<double> b)
      : name(std::move(n)), bounds(std::move(b)), counts(bounds.size() + 1, 0) {}

  void observe(double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i])
      ++i;
    counts[i]++;
    count++;
    sum += v;
  }
  /// The value below which `q` (0..1) of the observations fall, by linear interpolation in its
  /// bucket; 0 without observations, the last bound for the overflow bucket.
  double quantile(double q) const;
};

/// Bounds in seconds for disk and network latencies: 25 µs to 10 s.
const std::vector<double>& latency_bounds();
/// Bounds for counts per batch: 1 to 4096, powers of two.
const std::vector<double>& batch_bounds();

/// A histogram one thread observes into and others snapshot, without locks (relaxed counters:
/// a snapshot may miss observations in flight, never invents any).
template <size_t N>
class histogram_recorder {
public:
  histogram_recorder(std::string name, const std::vector<double>& bounds)
      : name_(std::move(name)), bounds_(bounds) {}
  void observe(double v) {
    size_t i = 0;
    while (i < bounds_.size() && v > bounds_[i])
      ++i;
    counts_[i].fetch_add(1, std::memory_order_relaxed);
    sum_micros_.fetch_add(static_cast<uint64_t>(v * 1e6), std::memory_order_relaxed);
  }
  histogram snapshot() const {
    histogram h{name_, bounds_};
    for (size_t i = 0; i <= bounds_.size() && i < N; ++i) {
      h.counts[i] = counts_[i].load(std::memory_order_relaxed);
      h.count += h.counts[i];  // the total of what was read, so +Inf >= every bucket
    }
    h.sum = static_cast<double>(sum_micros_.load(std::memory_order_relaxed)) / 1e6;
    return h;
  }

private:
  std::string name_;
  std::vector<double> bounds_;
  std::array<std::atomic<uint64_t>, N> counts_{};
  std::atomic<uint64_t> sum_micros_{0};  ///< sum·10⁶, so it fits an atomic integer
};

}  // namespace fusee::server
