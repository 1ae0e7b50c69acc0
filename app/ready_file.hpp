// The ready file of `fusee server` and `fusee handler` (--ready-file): what a script waits for.
// Written once the process serves, under a temporary name and then renamed (a reader never sees
// half of it); removed at start (a stale one names ports of a process gone) and at stop.
#pragma once

#include <optional>
#include <string>

namespace fusee::app {

/// Writes `text` to `path`; why it could not, if it could not (the caller stops: a script would
/// wait for the file for ever).
std::optional<std::string> write_ready_file(const std::string& path, const std::string& text);

/// Removes `path` if it is there (a path that cannot be removed is the writer's to report).
void remove_ready_file(const std::string& path);

}  // namespace fusee::app
