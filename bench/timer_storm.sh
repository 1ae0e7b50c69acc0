#!/usr/bin/env bash
# Timer storm: SHARDS shards all due at once (every shard is due at start), ENDPOINTS endpoints
# (fusee handler answering 200 at once), max_shards 100. Reports, per run:
#   start-up (launch -> ready file), the time from ready until every invocation is sent (counted
#   by /v1/invoker), and the server's RSS. A second server with BASE shards runs right after, so
#   RSS per shard = (RSS(SHARDS) - RSS(BASE)) / (SHARDS - BASE): what one more idle shard costs,
#   its wake-record actor included.
# Usage: bench/timer_storm.sh [BUILD_DIR]     (FUSEE_WRAP="perf record -g" to profile)
set -euo pipefail
BUILD=${1:-build}
SHARDS=${SHARDS:-100000}
BASE=${BASE:-1000}
ENDPOINTS=${ENDPOINTS:-4}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
echo s3cret > "$work/secret"
endpoints=""
for i in $(seq 1 "$ENDPOINTS"); do
  "$BUILD/app/fusee" handler --listen 127.0.0.1:0 --secret-file "$work/secret" --fail-status 200 \
    --ready-file "$work/h$i.ready" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 1 200); do [ -f "$work/h$i.ready" ] && break; sleep 0.05; done
  endpoints+=$(printf '[[endpoint]]\nurl = "http://%s/invoke"\nsecret_file = "secret"\nmax_shards = 100\nconcurrency = 100000\n' \
    "$(sed 's/listen=//' "$work/h$i.ready")")$'\n'
done

# run_one SHARDS -> prints "startup_ms sent_ms invocations rss_kib"
run_one() {
  local n=$1 dir="$work/run$1"
  mkdir -p "$dir"
  cp "$work/secret" "$dir/secret"
  printf '[server]\nshards = %d\n%s' "$n" "$endpoints" > "$dir/fusee.toml"
  python3 - "$BUILD/app/fusee" "$dir" "$n" ${FUSEE_WRAP:-} <<'PY'
import json, os, subprocess, sys, time, urllib.request
fusee, d, shards, wrap = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
cmd = wrap + [fusee, "server", "--config", f"{d}/fusee.toml", "--data-dir", f"{d}/data",
              "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
              "--ready-file", f"{d}/s.ready"]
launched = time.time()
p = subprocess.Popen(cmd, stderr=open(f"{d}/s.log", "w"))
while not os.path.exists(f"{d}/s.ready"):
    time.sleep(0.001)
ready = time.time()
ap = [l.split("=", 1)[1].strip() for l in open(f"{d}/s.ready") if l.startswith("admin=")][0]
want = (shards + 99) // 100
while True:
    m = json.load(urllib.request.urlopen(f"http://{ap}/v1/invoker"))
    sent = sum(e["invocations"] for e in m["endpoints"])
    if sent >= want:
        break
    time.sleep(0.002)
took = time.time() - ready
pid = p.pid if not wrap else int(subprocess.check_output(["pgrep", "-n", "-f", f"{d}/fusee.toml"]))
rss = int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1])
p.terminate()
p.wait()
print(f"{(ready - launched) * 1000:.0f} {took * 1000:.0f} {sent} {rss}")
PY
}

read -r s_start s_sent s_inv s_rss < <(run_one "$SHARDS")
read -r b_start b_sent b_inv b_rss < <(run_one "$BASE")
per=$(( (s_rss - b_rss) * 1024 / (SHARDS - BASE) ))
echo "shards $SHARDS: start-up $s_start ms, all $s_inv invocations sent $s_sent ms after ready, RSS $s_rss KiB"
echo "shards $BASE: start-up $b_start ms, all $b_inv invocations sent $b_sent ms after ready, RSS $b_rss KiB"
echo "RSS per additional shard (wake-record actor and all other per-shard state): $per bytes"
