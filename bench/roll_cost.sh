#!/usr/bin/env bash
# What a segment roll costs the commits behind it, two builds side by side: 256 records in flight
# for SECONDS_TP (10) s on a fresh server of each build in turn, PAIRS (4) pairs in alternating
# order; from the server's /metrics, the rolls made and their mean time (log_roll_seconds: the
# spare's zeros if not done, the header, the rename, fusee.newest since 3395415, the snapshot
# batch), beside the records/s of the run.
# Usage: bench/roll_cost.sh BUILD_A BUILD_B
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
A=${1:?usage: bench/roll_cost.sh BUILD_A BUILD_B}
B=${2:?usage: bench/roll_cost.sh BUILD_A BUILD_B}
PAIRS=${PAIRS:-4}
SECONDS_TP=${SECONDS_TP:-10}

work=$(mktemp -d /var/tmp/fusee-roll.XXXXXX)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"

# metric NAME: its value in the last /metrics scrape.
metric() { awk -v n="$1" '$1 == n { print $2 }' "$work/metrics"; }

machine_line "$work"
echo "command: bench/roll_cost.sh $A $B (PAIRS=$PAIRS SECONDS_TP=$SECONDS_TP)"
echo
echo "| pair | build | records/s | rolls | mean roll (ms) |"
echo "| --- | --- | --- | --- | --- |"
for p in $(seq 1 "$PAIRS"); do
  for which in $(pair_order "$p"); do
    start_fusee "$(build_of "$which")"
    tp=$("$B/bench/throughput" "$fusee_addr" 4 "$SECONDS_TP" 4 100 64)
    curl -s "http://$fusee_admin/metrics" >"$work/metrics"
    stop_fusee
    rolls=$(metric fusee_log_roll_seconds_count)
    sum=$(metric fusee_log_roll_seconds_sum)
    mean=$(python3 -c "print(f'{1000 * $sum / max($rolls, 1):.2f}')")
    echo "| $p | $which | $(json "$tp" records_per_s) | $rolls | $mean |"
  done
done
