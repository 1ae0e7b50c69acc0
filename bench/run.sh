#!/usr/bin/env bash
# Runs the server-core benchmarks side by side with their anchors and prints a Markdown report:
#   disk floor (fusee disk-check) | an ideal server's round trip (bench/wire_floor) | step latency
#   (bench/step_latency) | PostgreSQL commit latency
#   throughput at 64 and 256 in flight, beside the commit floor (bench/commit_floor, serial and
#   overlap: a plain group-commit server with the same client pattern) | PostgreSQL INSERT+COMMIT
#   at the same concurrencies
# Usage: bench/run.sh [BUILD_DIR]   (as root; installs postgresql if missing)
# Rounds alternate the subjects so drift of this noisy machine hits all of them alike.
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-3000}
SECONDS_TP=${SECONDS_TP:-5}
PG_BIN=/usr/lib/postgresql/15/bin

if [ ! -x "$PG_BIN/pgbench" ]; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15
fi

work=$(mktemp -d /var/tmp/fusee-bench.XXXXXX)
chmod 755 "$work"
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
  runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# -- PostgreSQL: fsync on, synchronous_commit on, one INSERT+COMMIT per record -----------------
pg_port=$(free_port)
mkdir -p "$work/pg" "$work/pgsock" && chown postgres "$work/pg" "$work/pgsock"
runuser -u postgres -- "$PG_BIN/initdb" -D "$work/pg" -A trust >/dev/null
cat >> "$work/pg/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $pg_port
unix_socket_directories = '$work/pgsock'
fsync = on
synchronous_commit = on
wal_sync_method = fdatasync
max_connections = 300
shared_buffers = 256MB
CONF
runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$work/pg" -l "$work/pgsock/pg.log" -w start >/dev/null
psql_() { runuser -u postgres -- psql -h 127.0.0.1 -p "$pg_port" -d postgres -qAt "$@"; }
psql_ -c "CREATE TABLE steps (id bigserial PRIMARY KEY, v bytea)"
echo "INSERT INTO steps (v) VALUES (decode('$(python3 -c "print((b'x'*100).hex())")', 'hex'));" > "$work/insert.sql"
chmod 644 "$work/insert.sql"

pg_latency() {  # -> "p50 p99" in microseconds, single client
  rm -f "$work"/pgsock/pgbench_log.*
  (cd "$work" && runuser -u postgres -- "$PG_BIN/pgbench" -h 127.0.0.1 -p "$pg_port" -n -c 1 \
     -t "$STEPS" -f "$work/insert.sql" -l --log-prefix="$work/pgsock/pgbench_log" postgres >/dev/null)
  cat "$work"/pgsock/pgbench_log.* | awk '{print $3}' | sort -n |
    awk '{a[NR]=$1} END {printf "%d %d\n", a[int(NR*0.5)], a[int(NR*0.99)]}'
}
pg_tps() {  # concurrency -> records per second (pgbench excludes its connection time; -T covers it)
  runuser -u postgres -- "$PG_BIN/pgbench" -h 127.0.0.1 -p "$pg_port" -n -c "$1" -j 2 \
    -T "$((SECONDS_TP * 2))" -f "$work/insert.sql" postgres >"$work/pgsock/pgbench.out" 2>&1 || true
  local tps
  tps=$(awk '/^tps/ {printf "%d\n", $3}' "$work/pgsock/pgbench.out")
  if [ -z "$tps" ]; then sed 's/^/  pgbench: /' "$work/pgsock/pgbench.out" >&2; echo 0; else echo "$tps"; fi
}

# -- fusee ------------------------------------------------------------------------------------
source "$(dirname "$0")/lib.sh"

machine_line "$work"
echo "command: bench/run.sh $BUILD (ROUNDS=$ROUNDS STEPS=$STEPS SECONDS_TP=$SECONDS_TP)"
echo
echo "## Step latency (one worker, one shard, sequential append -> DURABLE, 100-byte records)"
echo
echo "| round | disk floor (overwrite) p50 / p99 (us) | ideal server (wire_floor) p50 / p99 (us) | fusee step p50 / p99 (us) | PostgreSQL commit p50 / p99 (us) |"
echo "| --- | --- | --- | --- | --- |"
for r in $(seq 1 "$ROUNDS"); do
  floor=$("$BUILD/app/fusee" disk-check --data-dir "$work/disk" --runs "$STEPS" | head -1 |
          sed -E 's/.*p50 ([0-9]+) us, p99 ([0-9]+) us.*/\1 \2/')
  wire=$("$BUILD/bench/wire_floor" "$work" "$STEPS" inline)
  start_fusee "$BUILD"
  step=$("$BUILD/bench/step_latency" "$fusee_addr" "$STEPS" 100)
  stop_fusee
  pg=$(pg_latency)
  echo "| $r | ${floor% *} / ${floor#* } | $(json "$wire" p50_us) / $(json "$wire" p99_us) | $(json "$step" p50_us) / $(json "$step" p99_us) | ${pg% *} / ${pg#* } |"
done
echo
echo "## Throughput (64 shards, 100-byte records; concurrency = records awaiting durability)"
echo
echo "| round | concurrency | commit floor records/s, serial / overlap (per fsync) | fusee records/s | records per fsync | fusee / better floor | PostgreSQL records/s | ratio |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for r in $(seq 1 "$ROUNDS"); do
  for conc in 64 256; do
    per_shard=$((conc / 64))
    cfs=$("$BUILD/bench/commit_floor" "$work" "$SECONDS_TP" 4 "$conc" 100 serial)
    cfo=$("$BUILD/bench/commit_floor" "$work" "$SECONDS_TP" 4 "$conc" 100 overlap)
    start_fusee "$BUILD"
    tp=$("$BUILD/bench/throughput" "$fusee_addr" 4 "$SECONDS_TP" "$per_shard" 100 64)
    stop_fusee
    per_fsync=$(records_per_batch)
    pg=$(pg_tps "$conc")
    f=$(json "$tp" records_per_s)
    cs=$(json "$cfs" records_per_s)
    co=$(json "$cfo" records_per_s)
    echo "| $r | $conc | $cs ($(json "$cfs" records_per_fsync)) / $co ($(json "$cfo" records_per_fsync)) | $f | $per_fsync | $(python3 -c "print(f'{$f/max($cs,$co,1):.2f}')") | $pg | $(python3 -c "print(f'{$f/max($pg,1):.1f}x')") |"
  done
done
