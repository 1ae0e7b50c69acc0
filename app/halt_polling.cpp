#include "app/halt_polling.hpp"

#include <fstream>

namespace fusee::app {

namespace {

/// The first word of a one-line sysfs file, or "" if it cannot be read.
std::string first_word(const std::filesystem::path& p) {
  std::ifstream in{p};
  std::string word;
  in >> word;
  return word;
}

}  // namespace

std::optional<std::string> halt_polling_hint(const std::filesystem::path& sys) {
  auto parameter = sys / "module/haltpoll/parameters/guest_halt_poll_ns";
  if (first_word(sys / "devices/system/cpu/cpuidle/current_driver") != "haltpoll" ||
      first_word(parameter) != "0")
    return std::nullopt;
  return "this VM's idle vCPUs halt without polling (cpuidle haltpoll, " + parameter.string() +
         " = 0): each fdatasync's completion and each wake-up between threads waits for the "
         "hypervisor to wake a vCPU; at 200000 (200 us) a durable step was 10-34 % faster on "
         "this project's VMs, for host CPU spent polling; the setting is the operator's "
         "(docs/operations.md, \"Latency is high\")";
}

}  // namespace fusee::app
