#!/usr/bin/env bash
# The inspector and the dashboard at SHARDS (1,000,000) shards, two builds side by side: a fresh
# idle server of each build in turn, PAIRS (2) pairs in alternating order; each view asked TRIES
# (3) times, the time of each answer: the dashboard's poll (/v1/overview, with the grid), a page
# of shards, a page filtered by state, a page ranked by mailbox, /metrics, and `fusee inspect`;
# then what watching costs the node: a request to the directory (`/v1/actors?kind=directory`)
# every 20 ms for POLL_S (5) seconds while the dashboard's /v1/overview is asked back to back, its
# p50 / p99 / max.
# Usage: bench/inspect_scale.sh BUILD_A BUILD_B
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
A=${1:?usage: bench/inspect_scale.sh BUILD_A BUILD_B}
B=${2:?usage: bench/inspect_scale.sh BUILD_A BUILD_B}
SHARDS=${SHARDS:-1000000}
PAIRS=${PAIRS:-2}
TRIES=${TRIES:-3}
POLL_S=${POLL_S:-5}

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
echo "command: bench/inspect_scale.sh $A $B (SHARDS=$SHARDS PAIRS=$PAIRS TRIES=$TRIES)"
echo
# watched ADMIN: the directory's answer times while /v1/overview is asked back to back.
watched() {
  python3 - "$1" "$POLL_S" <<'PY'
import sys, threading, time, urllib.request
admin, seconds = sys.argv[1], float(sys.argv[2])
end = time.monotonic() + seconds
def poll():
    while time.monotonic() < end:
        urllib.request.urlopen(f"http://{admin}/v1/overview", timeout=30).read()
threading.Thread(target=poll, daemon=True).start()
lat = []
while time.monotonic() < end:
    t0 = time.monotonic()
    urllib.request.urlopen(f"http://{admin}/v1/actors?kind=directory", timeout=30).read()
    lat.append((time.monotonic() - t0) * 1000)
    time.sleep(0.02)
lat.sort()
at = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
print(f"{at(0.5):.1f} / {at(0.99):.1f} / {lat[-1]:.1f}")
PY
}

echo "| pair | build | /v1/overview (ms) | 10 shards | state=idle | top=mailbox | /metrics | fusee inspect | directory while watched p50 / p99 / max |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
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
    dir=$(watched "$admin")
    stop_fusee
    echo "| $p | $which | $ov | $page | $state | $top | $metrics | $(IFS=,; echo "${cli[*]}") | $dir |"
  done
done
