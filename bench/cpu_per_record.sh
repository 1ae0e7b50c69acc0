#!/usr/bin/env bash
# CPU per durable record: bench/throughput against a fresh server (4 connections x 16 shards,
# CONC records in flight, 100-byte records, SECS seconds); the server's CPU time from
# /proc/PID/stat and the client's from time(1), each divided by the records made durable.
# Usage: bench/cpu_per_record.sh [BUILD_DIR]   (CONC=64 SECS=5)
set -euo pipefail
B=${1:-build}
CONC=${CONC:-64}
SECS=${SECS:-5}
work=$(mktemp -d /var/tmp/fusee-cpu.XXXXXX)
server_pid=""
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"
start_fusee "$B"
t0=$(awk '{print $14+$15}' "/proc/$server_pid/stat")
/usr/bin/time -f "%U %S" -o "$work/ct" "$B/bench/throughput" "$fusee_addr" 4 "$SECS" $((CONC / 64)) 100 64 >"$work/tp"
t1=$(awk '{print $14+$15}' "/proc/$server_pid/stat")
stop_fusee
per_fsync=$(records_per_batch)
rec=$(json "$(cat "$work/tp")" records)
rps=$(json "$(cat "$work/tp")" records_per_s)
read -r cu cs <"$work/ct"
python3 -c "
rec = $rec; server = ($t1 - $t0) / $(getconf CLK_TCK); client = $cu + $cs
print(f'records/s {$rps}  records per fsync $per_fsync  server CPU {server:.2f} s = {server / rec * 1e6:.2f} us/record  client CPU {client:.2f} s = {client / rec * 1e6:.2f} us/record')"
