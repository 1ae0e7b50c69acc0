// `fusee disk-check`: the fdatasync latency floor of the disk under a data dir, measured the way
// the log writes (overwriting preallocated space), for contrast appending, and after idle time
// (what a cold wake's grant meets).
#pragma once

#include <string>

namespace fusee::app {

/// Prints p50/p99/max per case; returns the process exit code.
int run_disk_check(const std::string& dir, int runs, int idle_ms);

}  // namespace fusee::app
