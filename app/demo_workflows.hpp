// The workflows linked into `fusee worker` and `fusee handler`: the tutorial's order checkout and
// reminder, and `steps`, a configurable workflow the tests and benchmarks drive.
#pragma once

#include "worker/workflow.hpp"

namespace fusee::app {

/// Registers checkout, reminder and steps.
void add_demo_workflows(worker::registry& r);

}  // namespace fusee::app
