#!/usr/bin/env bash
# The log's commits right after a segment roll: a fresh server at 64 in flight (bench/throughput,
# four connections) for SECONDS under `strace -f -T -tt`, then, for each roll (the rename of
# next.prep), the longest fdatasync of the committing threads in the 300 ms after it, beside their
# p99 and max elsewhere. strace slows the server; compare builds in the same run, alternating.
# Usage: bench/roll_stall.sh [BUILD_DIR] [SECONDS]   (as root; installs strace if missing)
set -euo pipefail
BUILD=${1:-build}
SECONDS_RUN=${2:-10}
command -v strace >/dev/null ||
  { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q strace; }
work=$(mktemp -d /var/tmp/fusee-roll.XXXXXX)
server_pid=""
cleanup() { [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
source "$(dirname "$0")/lib.sh"
start_fusee "$BUILD"
strace -f -T -tt -e trace=fdatasync,rename,sync_file_range -p "$server_pid" -o "$work/trace" &
tracer=$!
sleep 0.5
"$BUILD/bench/throughput" "$fusee_addr" 4 "$SECONDS_RUN" 1 100 64 >/dev/null
kill -INT "$tracer"
wait "$tracer" || true
stop_fusee
python3 - "$work/trace" "$BUILD" <<'PY'
import re, sys
events, pending = [], {}
def at(h, m, sec):
    return int(h) * 3600 + int(m) * 60 + float(sec)
for line in open(sys.argv[1]):
    line = line.strip()
    m = re.match(r'(\d+) (\d+):(\d+):([\d.]+) <\.\.\. (\w+) resumed>.*<([\d.]+)>$', line)
    if m:  # the end of a call another thread's output had split
        start = pending.pop((m.group(1), m.group(5)), None)
        if start is not None:
            events.append((start, m.group(5), float(m.group(6)), m.group(1)))
        continue
    m = re.match(r'(\d+) (\d+):(\d+):([\d.]+) (\w+)\((.*)$', line)
    if not m:
        continue
    t = at(m.group(2), m.group(3), m.group(4))
    if m.group(6).endswith('<unfinished ...>'):
        pending[(m.group(1), m.group(5))] = t
        continue
    d = re.search(r'<([\d.]+)>$', m.group(6))
    events.append((t, m.group(5), float(d.group(1)) if d else 0.0, m.group(1)))
rolls = [t for t, call, _, _ in events if call == 'rename']
# The committing threads are the ones that start writeback (sync_file_range without waiting); the
# spare's filling thread waits in its own calls and is left out.
committers = {tid for _, call, _, tid in events if call == 'sync_file_range'}
syncs = [(t, d) for t, call, d, tid in events if call == 'fdatasync' and tid in committers]
after = [max([d for t, d in syncs if r <= t <= r + 0.3] or [0]) * 1000 for r in rolls]
rest = sorted(d for t, d in syncs if not any(r <= t <= r + 0.3 for r in rolls))
p99 = rest[int(len(rest) * 0.99)] * 1000 if rest else 0
print(f"{sys.argv[2]}: rolls {len(rolls)}; longest commit fdatasync after each roll (ms): "
      + ", ".join(f"{x:.1f}" for x in after)
      + f"; elsewhere p99 {p99:.1f} ms, max {rest[-1] * 1000 if rest else 0:.1f} ms ({len(rest)})")
PY
