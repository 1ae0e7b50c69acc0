// The workflow every simulated start of a load run runs, and the ids of its runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "load/observations.hpp"
#include "worker/workflow.hpp"

namespace fusee::load {

/// Workflow ids: "load-<run>-<i>", <run> random per process, so runs against the same server
/// never meet each other's workflows.
std::string run_id(uint64_t i);
/// The index of a run of this process, or nullopt (another run's workflow).
std::optional<uint64_t> index_of(const std::string& id);

/// The workflow every simulated start runs ("load"): input {steps, step_us, sleep_ms,
/// wake_at_ms, signal}. Steps are busy bodies that count their executions; a durable sleep
/// halfway (sleep_ms, or until wake_at_ms unix ms) whose lateness is recorded; with `signal`
/// a wait for signal "go" after the first step.
worker::registry workflows(observations* obs);

}  // namespace fusee::load
