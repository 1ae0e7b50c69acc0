#!/usr/bin/env bash
# The cost of watching a node: step latency and throughput with nobody watching, against the same
# with `fusee inspect --watch` (1 s) and a dashboard's polling (/v1/overview every second) plus a
# Prometheus scrape of /metrics every 5 s, in one run, rounds alternating so this noisy machine's
# drift hits both alike. Target (issue 10): no measurable difference at p50.
# Usage: bench/inspect_cost.sh [BUILD_DIR]
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
BUILD=${1:-build}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-3000}
SECONDS_TP=${SECONDS_TP:-5}

work=$(mktemp -d /var/tmp/fusee-inspect-cost.XXXXXX)
server_pid=""
watchers=()
stop_watchers() {
  for p in "${watchers[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  watchers=()
}
cleanup() {
  stop_watchers
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

source "$(dirname "$0")/lib.sh"
export FUSEE_INSPECT_LISTEN=127.0.0.1:0

start_watchers() {
  "$BUILD/app/fusee" inspect --node "$fusee_inspect" --watch --interval-ms 1000 >/dev/null 2>&1 &
  watchers+=($!)
  (while sleep 1; do curl -s -o /dev/null "http://$fusee_admin/v1/overview"; done) &
  watchers+=($!)
  (while sleep 5; do curl -s -o /dev/null "http://$fusee_admin/metrics"; done) &
  watchers+=($!)
}

# one SUBJECT: "none" or "watched" -> "step_p50 step_p99 records_per_s"
measure() {
  start_fusee "$BUILD"
  [ "$1" = watched ] && start_watchers
  sleep 1  # let the watchers start polling before the measurement
  local step tp
  step=$("$BUILD/bench/step_latency" "$fusee_addr" "$STEPS" 100)
  tp=$("$BUILD/bench/throughput" "$fusee_addr" 4 "$SECONDS_TP" 1 100 64)
  stop_watchers
  stop_fusee
  echo "$(json "$step" p50_us) $(json "$step" p99_us) $(json "$tp" records_per_s)"
}

machine_line "$work"
echo "command: bench/inspect_cost.sh $BUILD (ROUNDS=$ROUNDS STEPS=$STEPS SECONDS_TP=$SECONDS_TP)"
echo
echo "| round | none: step p50 / p99 (us) | watched: step p50 / p99 (us) | none: records/s at 64 | watched: records/s at 64 |"
echo "| --- | --- | --- | --- | --- |"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then
    a=$(measure none); b=$(measure watched)
  else
    b=$(measure watched); a=$(measure none)
  fi
  read -r a50 a99 atp <<<"$a"
  read -r b50 b99 btp <<<"$b"
  echo "| $r | $a50 / $a99 | $b50 / $b99 | $atp | $btp |"
done
