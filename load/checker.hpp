// The end of a load run asks the server what became of runs it did not see finish: `result`
// calls on one connection, many in flight at once (a shard's calls park together and one holder
// answers them all), each sent again while the run is still running or its answer was "holder
// lost" or "parked too long", until the deadline.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "client/security.hpp"

namespace fusee::load {

struct run_fate {
  /// The run's status ("completed", "running", "failed", "cancelled"), "not_found" when the
  /// server does not know it, or "unknown" when no answer said (detail says why).
  std::string status = "unknown";
  std::string detail;
};

/// One fate per id, in order. `err` is set when the server could not be reached at all. Once
/// `stopped` (if given) says true, within 100 ms, the runs not yet answered stay "unknown".
std::vector<run_fate> ask_fates(const std::string& server, const client::security& sec,
                                const std::vector<std::string>& ids,
                                std::chrono::steady_clock::time_point deadline, std::string* err,
                                const std::function<bool()>& stopped = {});

}  // namespace fusee::load
