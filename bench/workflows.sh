#!/usr/bin/env bash
# The workflow runtime against the raw protocol, side by side on fresh servers (64 shards):
#   step: bench/step_latency (APPEND -> DURABLE, sequential)  vs  a workflow of STEPS no-op steps
#         (workflow_bench chain: start -> durable result, per step)
#   many: bench/throughput (4 workers, 1 record in flight per shard = 64)  vs  WORKFLOWS workflows
#         of 10 no-op steps started 8 x 128 pipelined (workflow_bench many)
# Usage: bench/workflows.sh [BUILD_DIR]; ROUNDS (3) alternate the subjects. Prints Markdown.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-1000}
WORKFLOWS=${WORKFLOWS:-10000}
work=$(mktemp -d /var/tmp/fusee-wfbench.XXXXXX)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

echo "command: bench/workflows.sh $BUILD (ROUNDS=$ROUNDS STEPS=$STEPS WORKFLOWS=$WORKFLOWS)"
machine_line "$work"
echo
echo "| round | raw step p50 µs | workflow step µs | workflow of $STEPS steps ms | raw records/s (64 in flight) | workflows/s | steps/s | workflow records/s |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  start_fusee "$BUILD"
  raw=$("$BUILD/bench/step_latency" "$fusee_addr" 3000 100)
  stop_fusee
  start_fusee "$BUILD"
  chain=$("$BUILD/bench/workflow_bench" "$fusee_addr" chain "$STEPS" 20)
  stop_fusee
  start_fusee "$BUILD"
  tp=$("$BUILD/bench/throughput" "$fusee_addr" 4 5 1 100 64)
  stop_fusee
  start_fusee "$BUILD"
  many=$("$BUILD/bench/workflow_bench" "$fusee_addr" many "$WORKFLOWS" 10 8 128)
  stop_fusee
  echo "| $r | $(json "$raw" p50_us) | $(json "$chain" per_step_us) | $(json "$chain" workflow_ms) | $(json "$tp" records_per_s) | $(json "$many" workflows_per_s) | $(json "$many" steps_per_s) | $(json "$many" records_per_s) |"
done
