#include "actors/histogram.hpp"

namespace fusee::server {

double histogram::quantile(double q) const {
  if (count == 0) return 0;
  double rank = q * static_cast<double>(count);
  double seen = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    double next = seen + static_cast<double>(counts[i]);
    if (next >= rank && counts[i] > 0) {
      if (i >= bounds.size()) return bounds.empty() ? 0 : bounds.back();
      double lo = i == 0 ? 0 : bounds[i - 1];
      double frac = (rank - seen) / static_cast<double>(counts[i]);
      return lo + (bounds[i] - lo) * frac;
    }
    seen = next;
  }
  return bounds.empty() ? 0 : bounds.back();
}

const std::vector<double>& latency_bounds() {
  static const std::vector<double> b{0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001,
                                     0.0025,   0.005,   0.01,   0.025,   0.05,   0.1,
                                     0.25,     0.5,     1,      2.5,     5,      10};
  return b;
}

const std::vector<double>& batch_bounds() {
  static const std::vector<double> b{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  return b;
}

}  // namespace fusee::server
