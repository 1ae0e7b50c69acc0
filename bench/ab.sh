#!/usr/bin/env bash
# Two builds of fusee side by side on the server-core benchmarks, rounds alternating so the drift
# of this noisy machine hits both alike: the disk floor, step latency, throughput at 64 and 256
# records in flight. For "no worse than before" checks of a change against the commit before it.
# Within each pair the order alternates too (A then B in odd rounds, B then A in even ones), so a
# build is not always the one measured right after the other's run; the tables stay A | B.
# B's bench programs drive both servers, so only the servers differ.
# Usage: bench/ab.sh BUILD_A BUILD_B   (e.g. a worktree of the previous commit built in its build/)
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
A=${1:?usage: bench/ab.sh BUILD_A BUILD_B}
B=${2:?usage: bench/ab.sh BUILD_A BUILD_B}
ROUNDS=${ROUNDS:-4}  # even: each build goes first in half the pairs
STEPS=${STEPS:-3000}
SECONDS_TP=${SECONDS_TP:-5}

work=$(mktemp -d /var/tmp/fusee-ab.XXXXXX)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

source "$(dirname "$0")/lib.sh"

machine_line "$work"
echo "command: bench/ab.sh $A $B (ROUNDS=$ROUNDS STEPS=$STEPS SECONDS_TP=$SECONDS_TP)"
echo
echo "| round | disk floor p50 (us) | A step p50 / p99 (us) | B step p50 / p99 (us) |"
echo "| --- | --- | --- | --- |"
for r in $(seq 1 "$ROUNDS"); do
  floor=$("$B/app/fusee" disk-check --data-dir "$work/disk" --runs "$STEPS" --idle-ms 0 | head -1 |
          sed -E 's/.*p50 ([0-9]+) us.*/\1/')
  declare -A cell=()
  for which in $(pair_order "$r"); do
    start_fusee "$(build_of "$which")"
    step=$("$B/bench/step_latency" "$fusee_addr" "$STEPS" 100)
    stop_fusee
    cell[$which]="$(json "$step" p50_us) / $(json "$step" p99_us)"
  done
  echo "| $r | $floor | ${cell[A]} | ${cell[B]} |"
done
echo
echo "| round | concurrency | A records/s | B records/s | B / A |"
echo "| --- | --- | --- | --- | --- |"
for r in $(seq 1 "$ROUNDS"); do
  for conc in 64 256; do
    per_shard=$((conc / 64))
    declare -A rate=()
    for which in $(pair_order "$r"); do
      start_fusee "$(build_of "$which")"
      tp=$("$B/bench/throughput" "$fusee_addr" 4 "$SECONDS_TP" "$per_shard" 100 64)
      stop_fusee
      rate[$which]=$(json "$tp" records_per_s)
    done
    echo "| $r | $conc | ${rate[A]} | ${rate[B]} | $(python3 -c "print(f'{${rate[B]}/max(${rate[A]},1):.2f}')") |"
  done
done
