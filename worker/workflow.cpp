#include "worker/workflow.hpp"

namespace fusee::worker {

std::string registry::list() const {
  std::string out;
  for (auto& [n, f] : types_)
    (out += out.empty() ? "" : ", ") += n;
  return out.empty() ? "none" : out;
}

}  // namespace fusee::worker
