# Shared by the server-core benchmark scripts (source it; it uses $work and sets $server_pid,
# $fusee_addr).

# http_off BUILD: the flags that keep BUILD's HTTP API and inspector off their fixed default ports
# (nothing for builds from before them, so two builds can still be compared side by side).
http_off() {
  local help
  help=$("$1/app/fusee" server --help 2>/dev/null)
  if grep -q -- --http-listen <<<"$help"; then echo -n "--http-listen off "; fi
  if grep -q -- --inspect-listen <<<"$help"; then
    echo -n "--inspect-listen ${FUSEE_INSPECT_LISTEN:-off}"  # inspect_cost.sh, inspect_scale.sh turn it on
  fi
}

# start_fusee BUILD [SHARDS]: a fresh `fusee server` with SHARDS (64) shards on a free port, its
# log in $work.
start_fusee() {
  rm -rf "$work/fusee"
  "$1/app/fusee" server --data-dir "$work/fusee" --shards "${2:-64}" --listen 127.0.0.1:0 \
    --admin-listen 127.0.0.1:0 $(http_off "$1") \
    --ready-file "$work/ready" 2>"$work/fusee.log" &
  server_pid=$!
  for _ in $(seq 1 200); do [ -f "$work/ready" ] && break; sleep 0.05; done
  fusee_addr=$(grep '^listen=' "$work/ready" | cut -d= -f2)
  fusee_admin=$(grep '^admin=' "$work/ready" | cut -d= -f2)
  fusee_inspect=$(grep '^inspect=' "$work/ready" | cut -d= -f2 || true)
  rm -f "$work/ready"
}
stop_fusee() { kill "$server_pid"; wait "$server_pid" || true; server_pid=""; }
# records_per_batch: the log's records per batch from the last stopped server's log (both the
# plain "N records per batch" of older builds and the key=value line of newer ones).
records_per_batch() {
  sed -nE 's/.* ([0-9.]+) records per batch.*/\1/p; s/.*records_per_batch=([0-9.]+).*/\1/p' "$work/fusee.log"
}
# build_of A|B: the build dir of $A or $B (two-build scripts; pair_order gives the order).
build_of() { if [ "$1" = A ]; then echo "$A"; else echo "$B"; fi; }
# pair_order N: A and B in the order the Nth pair of an A/B comparison runs them (A first in odd
# pairs, B first in even ones: neither build is always measured right after the other's run).
pair_order() { if (($1 % 2)); then echo "A B"; else echo "B A"; fi; }
# json TEXT KEY: one field of a bench program's JSON line.
json() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }
# machine_line [DIR]: the "machine:" line of a report: cores, memory, kernel, the idle vCPU's halt
# polling (on a KVM guest, 0 sends each wake-up of an idle vCPU through the hypervisor, which moves
# every latency here; docs/operations.md) and, given DIR, the device it is on.
machine_line() {
  local idle poll=/sys/module/haltpoll/parameters/guest_halt_poll_ns
  idle=$(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo none)
  if [ "$idle" = haltpoll ] && [ -r "$poll" ]; then idle="$idle, guest_halt_poll_ns=$(cat "$poll")"; fi
  echo -n "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo -n ", $(uname -r); cpuidle $idle"
  if [ -n "${1:-}" ]; then echo -n "; data on $(df --output=source "$1" | tail -1)"; fi
  echo
}
# start_echo_handler BUILD: BUILD's `fusee handler --mode echo` on a free loopback port (its pid
# added to $pids) and, for it, $work/fusee.toml: 16 shards and one endpoint, the handler.
start_echo_handler() {
  echo s3cret-s3cret-s3cret > "$work/secret"
  "$1/app/fusee" handler --mode echo --listen 127.0.0.1:0 --secret-file "$work/secret" \
    --ready-file "$work/h.ready" 2>/dev/null &
  pids+=($!)
  for _ in $(seq 1 200); do [ -f "$work/h.ready" ] && break; sleep 0.05; done
  local hp
  hp=$(sed 's/listen=//' "$work/h.ready")
  printf '[server]\nshards = 16\n[[endpoint]]\nurl = "http://%s/invoke"\nsecret_file = "secret"\n' "$hp" > "$work/fusee.toml"
}
# await_startup_invocation ADMIN: waits (up to ~10 s) until the node at admin address ADMIN has
# ended its start-up (`recovery`) invocation, so every call after it is a cold wake; fails, saying
# so, if it has not by then.
await_startup_invocation() {
  python3 - "$1" <<'PY'
import json, sys, time, urllib.request
for _ in range(200):
    m = json.load(urllib.request.urlopen(f"http://{sys.argv[1]}/v1/invoker"))
    e = m["endpoints"][0]
    if e["succeeded"] >= 1 and e["inFlight"] == 0 and m["invokingShards"] == 0:
        break
    time.sleep(0.05)
else:
    sys.exit("the start-up invocation did not end")
PY
}
