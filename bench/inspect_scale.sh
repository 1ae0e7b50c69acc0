#!/usr/bin/env bash
# The inspector and the dashboard at SHARDS (1,000,000) shards, two builds side by side: a fresh
# idle server of each build in turn, PAIRS (2) pairs in alternating order; each view asked TRIES
# (3) times, the time of each answer: the dashboard's poll (/v1/overview, with the grid), a page
# of shards, a page filtered by state, a page ranked by mailbox, /metrics, and `fusee inspect`;
# then what watching costs the node, for POLL_S (10) seconds while a dashboard asks /v1/overview
# once a second: the server's CPU (% of one core) and a worker's HELLO -> LEASE (the directory's
# own work, not through the inspector; `bench/hello_lease` of BUILD_B, 20 ms apart), its p50 / p99
# / max.
# Usage: bench/inspect_scale.sh BUILD_A BUILD_B
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
A=${1:?usage: bench/inspect_scale.sh BUILD_A BUILD_B}
B=${2:?usage: bench/inspect_scale.sh BUILD_A BUILD_B}
SHARDS=${SHARDS:-1000000}
PAIRS=${PAIRS:-2}
TRIES=${TRIES:-3}
POLL_S=${POLL_S:-10}

work=$(mktemp -d /var/tmp/fusee-inspect.XXXXXX)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"
export FUSEE_INSPECT_LISTEN=127.0.0.1:0  # (start_fusee keeps the inspector off otherwise)

# times URL: each try's answer time in ms, comma-separated.
times() {
  local out=()
  for _ in $(seq "$TRIES"); do
    out+=("$(curl -s -o /dev/null -w '%{time_total}' "$1" | python3 -c 'import sys; print(round(float(sys.stdin.read()) * 1000))')")
  done
  local IFS=,
  echo "${out[*]}"
}

machine_line "$work"
echo "command: bench/inspect_scale.sh $A $B (SHARDS=$SHARDS PAIRS=$PAIRS TRIES=$TRIES POLL_S=$POLL_S)"
echo
# cpu_ticks PID: the process's user + system CPU time so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# watched ADMIN ADDR: while a dashboard polls /v1/overview at ADMIN once a second, the server's CPU
# (% of one core) and HELLO -> LEASE at the worker address ADDR, p50 / p99 / max (ms).
watched() {
  local rounds=$((POLL_S * 1000 / 25 > 0 ? POLL_S * 1000 / 25 : 1)) lease poller t0 c0 c1 t1
  # (bounded on its own: an interrupted run's command substitution runs no trap)
  (end=$((SECONDS + POLL_S + 60)); while ((SECONDS < end)); do curl -s -o /dev/null "http://$1/v1/overview"; sleep 1; done) &
  poller=$!
  t0=$(date +%s%N)
  c0=$(cpu_ticks "$server_pid")
  lease=$("$B/bench/hello_lease" "$2" "$rounds" 20)
  c1=$(cpu_ticks "$server_pid")
  t1=$(date +%s%N)
  kill "$poller"; wait "$poller" 2>/dev/null || true
  python3 -c 'import json, sys; j = json.loads(sys.argv[1]); cpu = (int(sys.argv[3]) - int(sys.argv[2])) * 100 / int(sys.argv[5]) / ((int(sys.argv[4])) / 1e9); print("%.0f %% | %.1f / %.1f / %.1f" % ((cpu,) + tuple(j[k] / 1000 for k in ("lease_p50_us", "lease_p99_us", "lease_max_us"))))' \
    "$lease" "$c0" "$c1" "$((t1 - t0))" "$(getconf CLK_TCK)"
}

echo "| pair | build | /v1/overview (ms) | 10 shards | state=idle | top=mailbox | /metrics | fusee inspect | watched: server CPU | watched: HELLO -> LEASE p50 / p99 / max (ms) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for p in $(seq 1 "$PAIRS"); do
  for which in $(pair_order "$p"); do
    start_fusee "$(build_of "$which")" "$SHARDS"
    admin=$fusee_admin
    inspect=$fusee_inspect
    sleep 2  # past the start-up's recovery wave
    ov=$(times "http://$admin/v1/overview")
    page=$(times "http://$admin/v1/actors?kind=shard&limit=10")
    state=$(times "http://$admin/v1/actors?kind=shard&state=idle&limit=10")
    top=$(times "http://$admin/v1/actors?kind=shard&top=mailbox&limit=10")
    metrics=$(times "http://$admin/metrics")
    cli=()
    for _ in $(seq "$TRIES"); do
      t0=$(date +%s%N)
      "$B/app/fusee" inspect --node "$inspect" --kind shard --limit 5 >/dev/null
      cli+=($((($(date +%s%N) - t0) / 1000000)))
    done
    dir=$(watched "$admin" "$fusee_addr")
    stop_fusee
    echo "| $p | $which | $ov | $page | $state | $top | $metrics | $(IFS=,; echo "${cli[*]}") | $dir |"
  done
done
