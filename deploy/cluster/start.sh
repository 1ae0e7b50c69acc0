#!/usr/bin/env bash
# Starts the three-node example cluster (node-a/b/c.toml) on loopback and waits until every node
# serves and sees the other two; Ctrl-C stops all three. Data in deploy/cluster/data/, logs in
# deploy/cluster/logs/. `make cluster` builds first and runs this.
# Usage: start.sh [FUSEE_BINARY]   (default: build/app/fusee of this checkout, else `fusee`)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
fusee="${1:-$here/../../build/app/fusee}"
[ -x "$fusee" ] || fusee="$(command -v fusee || true)"
if [ -z "$fusee" ]; then
  echo "start.sh: no fusee binary (run \`make build\` first, or pass its path)" >&2
  exit 2
fi
mkdir -p "$here/logs"
pids=()
stop() {
  trap - INT TERM EXIT
  [ ${#pids[@]} -gt 0 ] && kill -TERM "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop INT TERM EXIT
for n in a b c; do
  "$fusee" server --config "$here/node-$n.toml" >"$here/logs/$n.log" 2>&1 &
  pids+=($!)
done
# Ready: each admin server answers /v1/overview with its two peers up.
for port in 7401 7501 7601; do
  for _ in $(seq 1 100); do
    if curl -fs "http://127.0.0.1:$port/v1/overview" 2>/dev/null |
      grep -o '"state":"up"' | wc -l | grep -qx 2; then
      continue 2
    fi
    for p in "${pids[@]}"; do
      if ! kill -0 "$p" 2>/dev/null; then
        echo "start.sh: a node stopped; its log:" >&2
        tail -n 20 "$here"/logs/*.log >&2
        exit 1
      fi
    done
    sleep 0.1
  done
  echo "start.sh: the node with admin port $port did not see its peers within 10 s" >&2
  tail -n 20 "$here"/logs/*.log >&2
  exit 1
done
cat <<TEXT
Three nodes serve 24 shards on loopback:
  node a: workers/clients 127.0.0.1:7400, HTTP API :7402, dashboard http://127.0.0.1:7401/, shards 0-7
  node b: workers/clients 127.0.0.1:7500, HTTP API :7502, dashboard http://127.0.0.1:7501/, shards 8-15
  node c: workers/clients 127.0.0.1:7600, HTTP API :7602, dashboard http://127.0.0.1:7601/, shards 16-23
Try (in another terminal):
  $fusee worker --server 127.0.0.1:7400          # follows the map: connects to all three
  $fusee start --server 127.0.0.1:7500 checkout order-1 '{"amount": 40}'
  $fusee inspect --node 127.0.0.1:7403 --cluster
Logs: $here/logs/. Ctrl-C stops the cluster.
TEXT
wait -n "${pids[@]}" || true
echo "start.sh: a node stopped; stopping the others (logs in $here/logs/)" >&2
