#!/usr/bin/env bash
# CPU per durable record: bench/throughput against a fresh server (4 connections x 16 shards,
# CONC records in flight, 100-byte records, SECS seconds); the server's CPU time from
# /proc/PID/stat and the client's from time(1), each divided by the records made durable; and
# how a commit cycle splits (from /metrics): a batch's write + fdatasync on average, and the rest
# of the cycle, off the disk (the DURABLE sends, the clients' turns, reading and admitting the
# next batch), which moves less with the disk's speed than records/s does.
# Usage: bench/cpu_per_record.sh [BUILD_DIR] [BUILD_B]   (CONC=64 SECS=5)
# With BUILD_B: PAIRS (4) pairs of both, A then B in odd pairs and B then A in even ones, each line
# marked A or B; BUILD_DIR's bench/throughput drives both.
set -euo pipefail
B=${1:-build}
B2=${2:-}
CONC=${CONC:-64}
SECS=${SECS:-5}
work=$(mktemp -d /var/tmp/fusee-cpu.XXXXXX)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

# measure SERVER_BUILD: one run, one line.
measure() {
  start_fusee "$1"
  local t0 t1 per_fsync rec rps cu cs
  t0=$(awk '{print $14+$15}' "/proc/$server_pid/stat")
  /usr/bin/time -f "%U %S" -o "$work/ct" "$B/bench/throughput" "$fusee_addr" 4 "$SECS" $((CONC / 64)) 100 64 >"$work/tp"
  t1=$(awk '{print $14+$15}' "/proc/$server_pid/stat")
  local commits
  # (A server that does not answer leaves the split out; the run's other figures still count.
  # The histogram also holds the few batches before the run: the split is approximate.)
  commits=$({ curl -s -m 5 "http://$fusee_admin/metrics" || true; } | awk '/^fusee_log_fsync_seconds_sum/ {s = $2}
    /^fusee_log_fsync_seconds_count/ {c = $2} END {if (c > 0) print s, c; else print 0, 0}')
  stop_fusee
  per_fsync=$(records_per_batch)
  rec=$(json "$(cat "$work/tp")" records)
  rps=$(json "$(cat "$work/tp")" records_per_s)
  read -r cu cs <"$work/ct"
  local secs
  secs=$(json "$(cat "$work/tp")" seconds)
  python3 -c "
rec = $rec; server = ($t1 - $t0) / $(getconf CLK_TCK); client = $cu + $cs
fsync_s, commits = $(tr ' ' ',' <<<"$commits")
cycle = f'  per batch: write + fsync {fsync_s / commits * 1e6:.0f} us, off the disk {($secs - fsync_s) / commits * 1e6:.0f} us' if commits else ''
print(f'records/s {$rps}  records per fsync $per_fsync  server CPU {server:.2f} s = {server / rec * 1e6:.2f} us/record  client CPU {client:.2f} s = {client / rec * 1e6:.2f} us/record{cycle}')"
}

if [ -z "$B2" ]; then
  measure "$B"
  exit 0
fi
for p in $(seq 1 "${PAIRS:-4}"); do
  for which in $(pair_order "$p"); do
    printf '%s ' "$which"  # measure runs in this shell: set -e and the trap's server_pid hold
    if [ "$which" = A ]; then measure "$B"; else measure "$B2"; fi
  done
done
