// The latency hint about idle vCPUs that halt without polling, read from a sysfs tree made here.
#include <doctest/doctest.h>

#include <fstream>

#include "app/halt_polling.hpp"
#include "test_util.hpp"

using fusee::test::temp_dir;

namespace {

/// A sysfs tree with the cpuidle driver and, unless empty, haltpoll's guest_halt_poll_ns.
void make_sys(const std::filesystem::path& sys, const std::string& driver,
              const std::string& poll_ns) {
  std::filesystem::create_directories(sys / "devices/system/cpu/cpuidle");
  std::ofstream{sys / "devices/system/cpu/cpuidle/current_driver"} << driver << "\n";
  if (poll_ns.empty()) return;
  std::filesystem::create_directories(sys / "module/haltpoll/parameters");
  std::ofstream{sys / "module/haltpoll/parameters/guest_halt_poll_ns"} << poll_ns << "\n";
}

}  // namespace

TEST_CASE("a haltpoll guest that does not poll gets the hint, naming the setting and the docs") {
  temp_dir tmp;
  make_sys(tmp.path, "haltpoll", "0");
  auto hint = fusee::app::halt_polling_hint(tmp.path);
  REQUIRE(hint);
  CHECK(hint->find("guest_halt_poll_ns = 0") != std::string::npos);
  CHECK(hint->find("Latency is high") != std::string::npos);
}

TEST_CASE("polling on, another cpuidle driver, or no sysfs files give no hint") {
  temp_dir tmp;
  make_sys(tmp.path / "polling", "haltpoll", "200000");
  CHECK_FALSE(fusee::app::halt_polling_hint(tmp.path / "polling"));
  make_sys(tmp.path / "other", "intel_idle", "0");  // the module loaded but not the driver
  CHECK_FALSE(fusee::app::halt_polling_hint(tmp.path / "other"));
  make_sys(tmp.path / "no_module", "haltpoll", "");
  CHECK_FALSE(fusee::app::halt_polling_hint(tmp.path / "no_module"));
  CHECK_FALSE(fusee::app::halt_polling_hint(tmp.path / "missing"));
}
