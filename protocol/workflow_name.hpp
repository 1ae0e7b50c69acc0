// The rule for workflow ids, types and signal names that clients give: 1 to 256 bytes of UTF-8
// without control characters. The HTTP API refuses others (they sit in its paths) and so does the
// workflow runtime's start, so that every run can be reached both ways.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fusee::proto {

inline constexpr size_t max_workflow_name = 256;

/// Why `v` cannot be a workflow id, type or signal name (`what` names which), or nullopt.
std::optional<std::string> bad_workflow_name(std::string_view what, std::string_view v);

}  // namespace fusee::proto
