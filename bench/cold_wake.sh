#!/usr/bin/env bash
# Cold wake: client CALL for an unheld shard -> signed POST -> fusee handler connects back and
# leases -> call answered; ROUNDS rounds of CALLS calls, total and server share (p50/p99) and its
# legs (what each includes: bench/cold_wake.cpp's head). Each round ends with the machine's wake
# floor (bench/wake_floor: a chain of 20 sleeping threads woken one by one, about the hand-offs
# in a cold wake's server share) and its stalls (bench/stall_floor: a thread spinning on the
# clock for STALL_S seconds, run after the round, not beside it), the anchors for its p99.
# Usage: bench/cold_wake.sh [BUILD_DIR]   (WAKE_FLOOR, STALL_FLOOR: the programs, default BUILD's)
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
CALLS=${CALLS:-200}
WAKE_FLOOR=${WAKE_FLOOR:-$BUILD/bench/wake_floor}
STALL_FLOOR=${STALL_FLOOR:-$BUILD/bench/stall_floor}
STALL_S=${STALL_S:-5}
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
start_echo_handler "$BUILD"
"$BUILD/app/fusee" server --config "$work/fusee.toml" --data-dir "$work/data" \
  --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --http-listen off --inspect-listen off --ready-file "$work/s.ready" 2>"$work/s.log" &
pids+=($!)
for _ in $(seq 1 200); do [ -f "$work/s.ready" ] && break; sleep 0.05; done
sp=$(grep listen= "$work/s.ready" | cut -d= -f2)
ap=$(grep admin= "$work/s.ready" | cut -d= -f2)
# The start-up (`recovery`) invocation ends first, so every call below is a cold wake (if it has
# not ended after ~10 s, the rounds go ahead all the same, as they always did here).
await_startup_invocation "$ap" || true
machine_line
echo "command: bench/cold_wake.sh $BUILD (ROUNDS=$ROUNDS CALLS=$CALLS), 16 shards, fusee handler on loopback"
echo
echo "| round | total p50 / p99 (us) | server's share p50 / p99 (us) | of which call -> POST arrives p50 / p99 | HELLO -> LEASE p50 / p99 | the answer back p50 / p99 | not in the share: LEASE -> RELAYED_CALL p50 / p99 | wake floor, 20 hops, p50 / p99 (us) | machine stalls in ${STALL_S}s: gaps > 1 ms, > 3 ms, longest (us) |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for r in $(seq 1 "$ROUNDS"); do
  j=$("$BUILD/bench/cold_wake" "$sp" 16 "$CALLS")
  f='{}'  # an older build without wake_floor or stall_floor: "-"
  [ -x "$WAKE_FLOOR" ] && f=$("$WAKE_FLOOR" 20 "$CALLS" 26)
  g='{}'
  [ -x "$STALL_FLOOR" ] && g=$("$STALL_FLOOR" "$STALL_S")
  python3 - "$r" "$j" "$f" "$g" <<'PY'
import json, sys
r, d, w, g = sys.argv[1], *(json.loads(a) for a in sys.argv[2:])
num = lambda m, k: f"{m[k]:.0f}" if k in m else "-"  # a field an older build does not print
leg = lambda k: f"{num(d, k + '_p50_us')} / {num(d, k + '_p99_us')}"
print(f"| {r} | {leg('total')} | {leg('server')} | {leg('call_to_post')} | {leg('lease')} | {leg('back')} "
      f"| {leg('relay')} | {num(w, 'p50_us')} / {num(w, 'p99_us')} "
      f"| {num(g, 'gaps_over_1ms')}, {num(g, 'gaps_over_3ms')}, {num(g, 'longest_us')} |")
PY
done
