// Whether this machine's idle vCPUs halt without polling first: on a KVM guest whose cpuidle
// driver is haltpoll with guest_halt_poll_ns = 0, each disk completion and each wake-up between
// threads waits for the hypervisor to wake a halted vCPU (docs/operations.md, "Latency is high").
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace fusee::app {

/// The operator's hint when `sys` (the sysfs root, "/sys" but in tests) shows a haltpoll guest
/// that does not poll; nothing for another driver, polling on, or files that cannot be read.
std::optional<std::string> halt_polling_hint(const std::filesystem::path& sys = "/sys");

}  // namespace fusee::app
