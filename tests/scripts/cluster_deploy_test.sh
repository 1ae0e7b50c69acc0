#!/usr/bin/env bash
# deploy/cluster as a new user runs it: start.sh brings up three nodes on loopback (fixed ports
# 7400-7610: run alone), a worker connected to node a serves all three, the tutorial's checkout
# runs through node b on shards of every node, `fusee inspect --cluster` shows the three nodes,
# and stopping start.sh stops them all. Works on a copy, so data and logs stay in a temp dir.
# Usage: cluster_deploy_test.sh SOURCE_DIR FUSEE_BINARY
set -euo pipefail
src="$1"
fusee="$2"
tmp="$(mktemp -d)"
started=""
worker=""
cleanup() {
  [ -n "$worker" ] && kill -KILL "$worker" 2>/dev/null || true
  if [ -n "$started" ]; then
    kill -TERM "$started" 2>/dev/null || true
    wait "$started" 2>/dev/null || true
  fi
  pkill -KILL -f "$tmp/cluster/node-" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  tail -n 30 "$tmp"/cluster/logs/*.log "$tmp/start.out" "$tmp/worker.log" 2>/dev/null >&2 || true
  exit 1
}
cp -r "$src/deploy/cluster" "$tmp/cluster"
rm -rf "$tmp/cluster/data" "$tmp/cluster/logs"
bash "$tmp/cluster/start.sh" "$fusee" >"$tmp/start.out" 2>&1 &
started=$!
for _ in $(seq 1 150); do
  grep -q "Three nodes serve" "$tmp/start.out" && break
  kill -0 "$started" 2>/dev/null || fail "start.sh exited"
  sleep 0.1
done
grep -q "Three nodes serve" "$tmp/start.out" || fail "the cluster did not come up within 15 s"

"$fusee" worker --server 127.0.0.1:7400 --name tester >"$tmp/worker.log" 2>&1 &
worker=$!
for _ in $(seq 1 100); do
  [ "$(grep -c "connected to" "$tmp/worker.log" || true)" -ge 3 ] && break
  sleep 0.1
done
[ "$(grep -c "connected to" "$tmp/worker.log" || true)" -ge 3 ] || fail "the worker did not connect to all three nodes"

# Orders on every node's shards (24 shards: a 0-7, b 8-15, c 16-23), all started through node b.
for i in 1 2 3 4 5 6; do
  out="$("$fusee" start --server 127.0.0.1:7500 checkout "order-$i" '{"amount": 40}')" ||
    fail "start order-$i: $out"
  "$fusee" signal --server 127.0.0.1:7600 "order-$i" review '{"approved": true}' >/dev/null ||
    fail "signal order-$i"
done
for i in 1 2 3 4 5 6; do
  r="$("$fusee" result --server 127.0.0.1:7400 --wait-ms 10000 "order-$i")" || fail "result order-$i: $r"
  echo "$r" | grep -q '"status":"completed"' || fail "order-$i did not complete: $r"
done

view="$("$fusee" inspect --node 127.0.0.1:7503 --cluster)" || fail "inspect --cluster: $view"
for n in a b c; do
  echo "$view" | grep -q "== node $n " || fail "inspect --cluster does not show node $n: $view"
done
[ "$(echo "$view" | grep -c '^directory ')" -eq 3 ] || fail "not every node answered: $view"

kill -TERM "$started"
wait "$started" 2>/dev/null || true
started=""
for _ in $(seq 1 100); do
  pgrep -f "$tmp/cluster/node-" >/dev/null || break
  sleep 0.1
done
pgrep -f "$tmp/cluster/node-" >/dev/null && fail "nodes still run after start.sh stopped"
echo "ok: three nodes, 6 orders through b on every node's shards, inspect --cluster, clean stop"
