#!/usr/bin/env bash
# Cold wake, two server builds side by side: PAIRS pairs (A then B in odd pairs, B then A in even
# ones), each run a fresh server of that build and CALLS cold wakes (bench/cold_wake, as in
# bench/cold_wake.sh: 16 shards, the fusee handler on loopback). Prints per run the share and its
# legs (p50 / p99, us) and how often the server's CAF worker threads slept per cold wake (their
# voluntary context switches over the run, from /proc, divided by CALLS).
# B's handler and bench program drive both servers, so only the servers differ.
# Usage: bench/cold_wake_ab.sh BUILD_A BUILD_B   (PAIRS=4 CALLS=300)
set -euo pipefail
A=${1:?usage: bench/cold_wake_ab.sh BUILD_A BUILD_B}
B=${2:?usage: bench/cold_wake_ab.sh BUILD_A BUILD_B}
PAIRS=${PAIRS:-4}
CALLS=${CALLS:-300}
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
pids=()
server=""
cleanup() {
  for p in "${pids[@]}" $server; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
start_echo_handler "$B"

# caf_sleeps PID: the voluntary context switches of PID's CAF worker threads so far. CAF 0.17
# names its scheduler's workers and the middleman's thread alike (caf.multiplexer); the workers
# start first, so the thread with the highest id of that name is the middleman's and is left out.
caf_sleeps() {
  local t tids=()
  for t in /proc/"$1"/task/*; do
    [ "$(cat "$t/comm")" = caf.multiplexer ] && tids+=("${t##*/}")
  done
  mapfile -t tids < <(printf '%s\n' "${tids[@]}" | sort -n | head -n -1)
  local n=0
  for t in "${tids[@]}"; do
    n=$((n + $(awk '/^voluntary_ctxt_switches/ {print $2}' "/proc/$1/task/$t/status")))
  done
  echo "$n"
}

# run BUILD: one fresh server, CALLS cold wakes; the row's cells into $work/row. Runs in this
# shell (not in $(...)), so set -e and the cleanup hold for it.
run() {
  rm -rf "$work/data" "$work/s.ready"
  "$1/app/fusee" server --config "$work/fusee.toml" --data-dir "$work/data" \
    --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 $(http_off "$1") \
    --ready-file "$work/s.ready" 2>"$work/s.log" &
  server=$!
  for _ in $(seq 1 200); do [ -f "$work/s.ready" ] && break; sleep 0.05; done
  [ -f "$work/s.ready" ] || { echo "cold_wake_ab: $1's server did not start:" >&2; cat "$work/s.log" >&2; exit 1; }
  local sp ap before j after
  sp=$(grep listen= "$work/s.ready" | cut -d= -f2)
  ap=$(grep admin= "$work/s.ready" | cut -d= -f2)
  await_startup_invocation "$ap"
  before=$(caf_sleeps "$server")
  j=$("$B/bench/cold_wake" "$sp" 16 "$CALLS")
  after=$(caf_sleeps "$server")
  kill "$server"
  wait "$server" 2>/dev/null || true
  server=""
  python3 - "$j" "$before" "$after" "$CALLS" >"$work/row" <<'PY'
import json, sys
d, before, after, calls = json.loads(sys.argv[1]), *map(int, sys.argv[2:])
leg = lambda k: f"{d[k + '_p50_us']:.0f} / {d[k + '_p99_us']:.0f}"
print(f"{leg('server')} | {leg('call_to_post')} | {leg('lease')} | {leg('back')} "
      f"| {(after - before) / calls:.1f} |")
PY
}

machine_line
echo "command: bench/cold_wake_ab.sh $A $B (PAIRS=$PAIRS CALLS=$CALLS), 16 shards, fusee handler on loopback"
echo
echo "| pair | build | server's share p50 / p99 (us) | call -> POST arrives p50 / p99 | HELLO -> LEASE p50 / p99 | the answer back p50 / p99 | CAF worker sleeps per cold wake |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for p in $(seq 1 "$PAIRS"); do
  for x in $(pair_order "$p"); do
    if [ "$x" = A ]; then b=$A; else b=$B; fi
    run "$b"
    echo "| $p | $x | $(cat "$work/row")"
  done
done
