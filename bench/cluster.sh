#!/usr/bin/env bash
# A three-node cluster on this machine against one node, side by side (64 shards each way; the
# cluster: a 0-21, b 22-42, c 43-63, every process on the same 2 cores):
#   call: `describe` calls alternately straight to node b and through node a (forwarded over
#         CAF to b and back), p50/p99 of each (workflow_bench calls)
#   many: WORKFLOWS workflows of 10 no-op steps, 8 x 128 pipelined starts, against one node and
#         against the cluster (client connections spread over a, b, c: two calls in three are
#         forwarded; the worker follows the map: one connection and thread per node)
# Usage: bench/cluster.sh [BUILD_DIR]; ROUNDS (3) alternate the subjects. Prints Markdown.
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
CALLS=${CALLS:-2000}
WORKFLOWS=${WORKFLOWS:-5000}
work=$(mktemp -d /var/tmp/fusee-clusterbench.XXXXXX)
server_pid=""
cluster_pids=()
stop_cluster() {
  [ ${#cluster_pids[@]} -gt 0 ] && kill "${cluster_pids[@]}" 2>/dev/null && wait "${cluster_pids[@]}" 2>/dev/null || true
  cluster_pids=()
}
trap '[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null; stop_cluster; rm -rf "$work"' EXIT
source "$(dirname "$0")/lib.sh"

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_cluster BUILD: three fresh nodes; sets node_addr[0..2].
start_cluster() {
  local names=(a b c) ranges=("0-21" "22-42" "43-63") listen=() cluster=() i j
  for i in 0 1 2; do listen+=("127.0.0.1:$(free_port)"); cluster+=("127.0.0.1:$(free_port)"); done
  rm -rf "$work/cluster" && mkdir -p "$work/cluster"
  for i in 0 1 2; do
    {
      printf '[server]\ndata_dir = "%s"\nshards = 64\nlisten = "%s"\nadmin_listen = "127.0.0.1:0"\n' \
        "$work/cluster/${names[$i]}" "${listen[$i]}"
      printf 'http_listen = ""\ninspect_listen = ""\n[cluster]\nnode = "%s"\n' "${names[$i]}"
      for j in 0 1 2; do
        printf '[[cluster.nodes]]\nname = "%s"\ncluster = "%s"\nlisten = "%s"\nshards = "%s"\n' \
          "${names[$j]}" "${cluster[$j]}" "${listen[$j]}" "${ranges[$j]}"
      done
    } >"$work/cluster/${names[$i]}.toml"
    "$1/app/fusee" server --config "$work/cluster/${names[$i]}.toml" \
      2>"$work/cluster/${names[$i]}.log" &
    cluster_pids+=($!)
  done
  node_addr=("${listen[@]}")
  for i in 0 1 2; do  # linked: each node saw its two peers
    for _ in $(seq 1 200); do
      [ "$(grep -c 'cluster peer up' "$work/cluster/${names[$i]}.log" || true)" -ge 2 ] && break
      sleep 0.05
    done
  done
}

echo "command: bench/cluster.sh $BUILD (ROUNDS=$ROUNDS CALLS=$CALLS WORKFLOWS=$WORKFLOWS)"
machine_line "$work"
echo
echo "| round | direct call p50 µs | forwarded p50 µs | direct p99 µs | forwarded p99 µs | 1 node workflows/s | 3 nodes workflows/s | 1 node steps/s | 3 nodes steps/s |"
echo "|---|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  start_cluster "$BUILD"
  call=$("$BUILD/bench/workflow_bench" "${node_addr[0]}" calls "$CALLS" "${node_addr[1]}" "${node_addr[0]}" 22-42)
  stop_cluster
  start_fusee "$BUILD"
  one=$("$BUILD/bench/workflow_bench" "$fusee_addr" many "$WORKFLOWS" 10 8 128)
  stop_fusee
  start_cluster "$BUILD"
  three=$("$BUILD/bench/workflow_bench" "$(IFS=,; echo "${node_addr[*]}")" many "$WORKFLOWS" 10 8 128)
  stop_cluster
  echo "| $r | $(json "$call" direct_p50_us) | $(json "$call" forwarded_p50_us) | $(json "$call" direct_p99_us) | $(json "$call" forwarded_p99_us) | $(json "$one" workflows_per_s) | $(json "$three" workflows_per_s) | $(json "$one" steps_per_s) | $(json "$three" steps_per_s) |"
done
