// One `fusee load` run: a server (started here, or at the scenario's address), long-lived workers
// running the real runtime in this process, open-loop clients starting workflows at the
// scenario's rate, a live progress line, then the checks, a human summary and a JSON report.
#pragma once

#include <string>

#include "load/scenario.hpp"

namespace fusee::load {

struct run_options {
  std::string fusee_binary;  ///< to start the server with (this very program)
  std::string report_file;   ///< the JSON report; empty: load-<name>.json in the current directory
  /// False: the performance targets (latency, rates, memory) are not checked (the short runs of
  /// `make test` check correctness only: timings on a loaded CI machine are not a verdict).
  bool performance_targets = true;
};

/// 0 when every check and target held; 1 when one failed (each is named); 2 when the run could
/// not start (the reason is printed).
int run_load(const scenario& s, const run_options& options);

}  // namespace fusee::load
