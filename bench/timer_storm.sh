#!/usr/bin/env bash
# Timer storm: SHARDS shards all due at once (every shard is due at start), ENDPOINTS endpoints
# (fusee handler answering 200 at once), max_shards 100: time from the server being ready until
# every invocation is sent (counted by /v1/invoker), and the server's RSS per shard.
# Usage: bench/timer_storm.sh [BUILD_DIR]
set -euo pipefail
BUILD=${1:-build}
SHARDS=${SHARDS:-100000}
ENDPOINTS=${ENDPOINTS:-4}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
echo s3cret > "$work/secret"
printf '[server]\nshards = %d\n' "$SHARDS" > "$work/fusee.toml"
for i in $(seq 1 "$ENDPOINTS"); do
  "$BUILD/app/fusee" handler --listen 127.0.0.1:0 --secret-file "$work/secret" --fail-status 200 \
    --ready-file "$work/h$i.ready" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 1 200); do [ -f "$work/h$i.ready" ] && break; sleep 0.05; done
  printf '[[endpoint]]\nurl = "http://%s/invoke"\nsecret_file = "secret"\nmax_shards = 100\nconcurrency = 100000\n' \
    "$(sed 's/listen=//' "$work/h$i.ready")" >> "$work/fusee.toml"
done
start=$(date +%s.%N)
"$BUILD/app/fusee" server --config "$work/fusee.toml" --data-dir "$work/data" \
  --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --ready-file "$work/s.ready" 2>"$work/s.log" &
spid=$!
pids+=($spid)
for _ in $(seq 1 600); do [ -f "$work/s.ready" ] && break; sleep 0.01; done
ready=$(date +%s.%N)
ap=$(grep admin= "$work/s.ready" | cut -d= -f2)
python3 - "$ap" "$SHARDS" "$ready" "$spid" <<'PY'
import json, sys, time, urllib.request
ap, shards, ready, pid = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
want = (shards + 99) // 100
while True:
    m = json.load(urllib.request.urlopen(f"http://{ap}/v1/invoker"))
    sent = sum(e["invocations"] for e in m["endpoints"])
    if sent >= want:
        break
    time.sleep(0.01)
took = time.time() - ready
rss = int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1])
print(f"shards {shards}, invocations {sent}: all sent {took*1000:.0f} ms after the server was ready;"
      f" server RSS {rss} KiB = {rss*1024/shards:.0f} bytes per shard (all state, not per-shard actors)")
PY
