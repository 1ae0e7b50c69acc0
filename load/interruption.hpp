// SIGINT and SIGTERM during a load run: the run stops early and cleans up after itself (its
// server, its temporary directory) instead of dying with them still there.
#pragma once

namespace fusee::load {

/// From now on the first SIGINT or SIGTERM is caught; a second one acts as usual (it ends the
/// process at once).
void catch_interruptions();

/// The signal caught (SIGINT or SIGTERM), or 0.
int interrupted();

}  // namespace fusee::load
