#!/usr/bin/env bash
# Timer storm: SHARDS shards all due at once (every shard is due at start), ENDPOINTS endpoints
# (fusee handler answering 200 at once), max_shards 100. Reports, per run:
#   start-up (launch -> ready file), the time from ready until every shard was sent in an invocation (counted
#   by /v1/invoker), and the server's RSS. A second server with BASE shards runs right after, so
#   RSS per shard = (RSS(SHARDS) - RSS(BASE)) / (SHARDS - BASE): what one more idle shard costs,
#   its wake-record actor included.
# Then the real timer storm: ENDPOINTS handlers that serve (connect back, lease, report idle), a
# server with SHARDS shards; once its start-up wave is served, bench/storm_worker takes every shard,
# reports them all due in DUE_MS and leaves. Reported: how long the server took to pass the
# million lease ends on to the scheduler, and from the timers' due time (DUE_MS after the IDLE
# was written) until every shard of the storm was sent in an invocation. DUE_MS is 10 s: passing
# on a million lease ends takes the server 2.5-4 s, and timers due before that are a storm that
# overlaps with it (DUE_MS=3000 shows how much). Then, unless RETIRE_MS=0: once the storm is served
# and while its records rest, the latency of a request to the directory every 20 ms, and the RSS
# once every record rests.
# Usage: bench/timer_storm.sh [BUILD_DIR]     (FUSEE_WRAP="perf record -g" to profile)
set -euo pipefail
BUILD=${1:-build}
SHARDS=${SHARDS:-100000}
BASE=${BASE:-1000}
ENDPOINTS=${ENDPOINTS:-4}
DUE_MS=${DUE_MS:-10000}
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; [ -n "${KEEP:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
echo s3cret-s3cret-s3cret > "$work/secret"
# The handlers' --max-connections: above the invoker's connections here (3,280 with 20,000
# descriptors), so that no POST is refused by a handler at its default 1,024 and retried after a
# backoff (the harness's limit, not the server's). Empty: the handlers' default (builds before
# the option, 4e10669).
HANDLER_CONNECTIONS=${HANDLER_CONNECTIONS-4096}
handler_limit=()
[ -n "$HANDLER_CONNECTIONS" ] && handler_limit=(--max-connections "$HANDLER_CONNECTIONS")
endpoints=""
for i in $(seq 1 "$ENDPOINTS"); do
  "$BUILD/app/fusee" handler --mode echo --listen 127.0.0.1:0 --secret-file "$work/secret" --fail-status 200 \
    --ready-file "$work/h$i.ready" ${handler_limit[@]+"${handler_limit[@]}"} 2>/dev/null &
  pids+=($!)
  for _ in $(seq 1 200); do [ -f "$work/h$i.ready" ] && break; sleep 0.05; done
  endpoints+=$(printf '[[endpoint]]\nurl = "http://%s/invoke"\nsecret_file = "secret"\nmax_shards = 100\nconcurrency = 100000\n' \
    "$(sed 's/listen=//' "$work/h$i.ready")")$'\n'
done

# run_one SHARDS -> prints "startup_ms sent_ms invocations rss_kib"
run_one() {
  local n=$1 dir="$work/run$1-$RANDOM"
  mkdir -p "$dir"
  cp "$work/secret" "$dir/secret"
  printf '[server]\nshards = %d\n%s' "$n" "$endpoints" > "$dir/fusee.toml"
  python3 - "$BUILD/app/fusee" "$dir" "$n" ${FUSEE_WRAP:-} <<'PY'
import json, os, subprocess, sys, time, urllib.request
fusee, d, shards, wrap = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
cmd = wrap + [fusee, "server", "--config", f"{d}/fusee.toml", "--data-dir", f"{d}/data",
              "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--http-listen", "off", "--inspect-listen", "off",
              "--ready-file", f"{d}/s.ready"]
launched = time.time()
p = subprocess.Popen(cmd, stderr=open(f"{d}/s.log", "w"))
while not os.path.exists(f"{d}/s.ready"):
    time.sleep(0.001)
ready = time.time()
ap = [l.split("=", 1)[1].strip() for l in open(f"{d}/s.ready") if l.startswith("admin=")][0]
while True:  # every shard is due once at start: sent when every shard was in an invocation
    m = json.load(urllib.request.urlopen(f"http://{ap}/v1/invoker"))
    sent = sum(e["invocations"] for e in m["endpoints"])
    if sum(e["shards"] for e in m["endpoints"]) >= shards:
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

if [ -z "${STORM_ONLY:-}" ]; then
read -r s_start s_sent s_inv s_rss < <(run_one "$SHARDS")
read -r b_start b_sent b_inv b_rss < <(run_one "$BASE")
per=$(( (s_rss - b_rss) * 1024 / (SHARDS - BASE) ))
echo "shards $SHARDS: start-up $s_start ms, all $s_inv invocations sent $s_sent ms after ready, RSS $s_rss KiB"
echo "shards $BASE: start-up $b_start ms, all $b_inv invocations sent $b_sent ms after ready, RSS $b_rss KiB"
echo "RSS per additional shard (wake-record actor and all other per-shard state): $per bytes"
fi

# -- the timer storm proper ------------------------------------------------------------------
serving=""
for i in $(seq 1 "$ENDPOINTS"); do
  "$BUILD/app/fusee" handler --mode echo --listen 127.0.0.1:0 --secret-file "$work/secret" \
    --ready-file "$work/g$i.ready" ${handler_limit[@]+"${handler_limit[@]}"} 2>/dev/null &
  pids+=($!)
  for _ in $(seq 1 200); do [ -f "$work/g$i.ready" ] && break; sleep 0.05; done
  serving+=$(printf '[[endpoint]]\nurl = "http://%s/invoke"\nsecret_file = "secret"\nmax_shards = 100\nconcurrency = 100000\n' \
    "$(sed 's/listen=//' "$work/g$i.ready")")$'\n'
done
dir="$work/storm"
mkdir -p "$dir"
cp "$work/secret" "$dir/secret"
retire=${RETIRE_MS-10000}  # empty: no [invoker] table (for builds before invoker.retire_idle_ms)
if [ -n "$retire" ]; then
  printf '[log]\nlevel = "%s"\n[server]\nshards = %d\n[invoker]\nretire_idle_ms = %d\n%s' "${STORM_LOG:-info}" "$SHARDS" "$retire" "$serving" > "$dir/fusee.toml"
else
  printf '[server]\nshards = %d\n%s' "$SHARDS" "$serving" > "$dir/fusee.toml"
fi
python3 - "$BUILD" "$dir" "$SHARDS" "$DUE_MS" <<'PY'
import json, os, subprocess, sys, time, urllib.request
build, d, shards, due_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
p = subprocess.Popen(os.environ.get("FUSEE_WRAP", "").split() + [f"{build}/app/fusee", "server", "--config", f"{d}/fusee.toml",
                      "--data-dir", f"{d}/data", "--listen", "127.0.0.1:0",
                      "--admin-listen", "127.0.0.1:0", "--http-listen", "off", "--inspect-listen", "off", "--ready-file", f"{d}/s.ready"],
                     stderr=open(f"{d}/s.log", "w"))
try:
    while not os.path.exists(f"{d}/s.ready"):
        time.sleep(0.001)
    conf = dict(l.strip().split("=", 1) for l in open(f"{d}/s.ready"))
    def metrics():  # a busy server may answer 503 (the invoker did not answer in 5 s): retry
        while True:
            try:
                return json.load(urllib.request.urlopen(f"http://{conf['admin']}/v1/invoker"))
            except OSError as e:
                print(f"(metrics: {e}; retrying)", file=sys.stderr)
                time.sleep(0.5)
    invoked = lambda m: sum(e["shards"] for e in m["endpoints"])  # shards sent in invocations
    t0 = time.time()
    while True:  # the start-up wave: every shard invoked once and back to idle
        m = metrics()
        if invoked(m) >= shards and m["dueShards"] == 0 and m["invokingShards"] == 0:
            break
        if time.time() - t0 > 120:
            sys.exit("the start-up wave did not settle in 120 s: " + json.dumps(m))
        time.sleep(0.05)
    before, before_shards = sum(e["invocations"] for e in m["endpoints"]), invoked(m)
    out = [int(x) for x in subprocess.check_output(
        [f"{build}/bench/storm_worker", conf["listen"], str(shards), str(due_ms)]).split()]
    reported_ms, closed_ms = out if len(out) == 2 else (out[0], out[0])  # older: the close only
    # The timers count from the IDLE's arrival, a moment after it was written: measured from the
    # write, a storm's lateness is if anything overstated.
    due_at = (reported_ms + due_ms) / 1000.0
    # How long the server takes to pass the lease ends to the scheduler: the first answer of the
    # scheduler (behind every message before it in its mailbox) that knows them all. Unknown
    # once the timers are due: shards served from then on are idle again.
    passed = "(not known: the timers were due before)"
    while time.time() < due_at:
        try:
            sc = json.load(urllib.request.urlopen(
                f"http://{conf['admin']}/v1/actors?kind=scheduler", timeout=60))["rows"][0]
        except OSError:  # a busy server may answer 503: ask again
            continue
        if sum(sc.get(k, 0) for k in ("waitingShards", "dueShards", "invokingShards")) >= shards:
            passed = f"{time.time() * 1000 - closed_ms:.0f} ms"
            break
        time.sleep(0.02)
    while True:
        m = metrics()
        sent = sum(e["invocations"] for e in m["endpoints"]) - before
        if invoked(m) - before_shards >= shards:
            break
        time.sleep(0.002)
    took = time.time() - due_at
    status = {l.split(":")[0]: l.split()[1] for l in open(f"/proc/{p.pid}/status") if l.startswith("Vm")}
    print(f"timer storm: {shards} timers due {due_ms} ms after the worker's IDLE; every lease end "
          f"with the scheduler {passed} after the worker left; all {sent} invocations "
          f"sent {took * 1000:.0f} ms after the timers were due; RSS {status['VmRSS']} KiB, "
          f"peak {status['VmHWM']} KiB")
    # Then the records rest again (invoker.retire_idle_ms, RETIRE_MS here): RSS once they do.
    # Meanwhile, once the storm's invocations are served, a request to the directory every 20 ms
    # (its stats: a few ms at a million shards) shows how long its other work waits.
    if os.environ.get("RETIRE_MS", "10000") in ("0", ""):
        sys.exit(0)
    t1 = time.time()
    while True:
        m = metrics()
        if m["dueShards"] == 0 and m["invokingShards"] == 0:
            break
        time.sleep(0.05)
    served = time.time() - t1
    actors, waits = None, []
    while True:
        asked = time.time()
        try:
            d_row = json.load(urllib.request.urlopen(
                f"http://{conf['admin']}/v1/actors?kind=directory", timeout=10))
            actors = d_row["rows"][0].get("recordActors")  # absent: it did not answer in time
            waits.append((time.time() - asked) * 1000)
        except OSError:
            pass
        if actors == 0 or time.time() - t1 > 300:
            break
        time.sleep(0.02)
    rss = [l.split()[1] for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0]
    waits.sort()
    at = lambda q: waits[min(len(waits) - 1, int(q * len(waits)))] if waits else float("nan")
    print(f"after the storm: served {served:.0f} s later; wake records with an actor {actors} "
          f"({time.time() - t1:.0f} s later), RSS {rss} KiB = {int(rss) * 1024 // shards} bytes "
          f"per shard; meanwhile a request to the directory p50 {at(0.5):.1f} / p99 {at(0.99):.1f}"
          f" / max {at(1.0):.1f} ms ({len(waits)} requests)")
finally:
    p.terminate()
    p.wait()
PY
