#include "protocol/workflow_name.hpp"

#include "protocol/wire.hpp"

namespace fusee::proto {

std::optional<std::string> bad_workflow_name(std::string_view what, std::string_view v) {
  if (v.empty() || v.size() > max_workflow_name)
    return std::string{what} + " must be 1 to " + std::to_string(max_workflow_name) +
           " bytes, not " + std::to_string(v.size());
  for (unsigned char c : v)
    if (c < 0x20 || c == 0x7f) return std::string{what} + " must not contain control characters";
  if (!valid_utf8(as_bytes(v))) return std::string{what} + " must be UTF-8";
  return std::nullopt;
}

}  // namespace fusee::proto
