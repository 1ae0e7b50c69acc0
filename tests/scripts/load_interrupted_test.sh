#!/usr/bin/env bash
# fusee load as an operator stops it: SIGTERM mid-run stops the server it started and removes its
# temporary directory (exit 143, no report); a run whose server's log fails ends at once (exit 1,
# a failed check); a bad --server, report path or setting is refused at once, before anything
# starts.
# Usage: load_interrupted_test.sh SOURCE_DIR FUSEE_BINARY
set -uo pipefail
src="$1"
fusee="$2"
tmp="$(mktemp -d)"
pid=""
cleanup() {
  [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
  pkill -KILL -f "$tmp/fusee-load-" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  cat "$tmp/out" >&2 2>/dev/null
  exit 1
}
scenario="$src/bench/scenarios/steady.toml"

# A run stopped by SIGTERM once it is under way.
TMPDIR="$tmp" "$fusee" load --scenario "$scenario" --duration-s 60 --rate 20 \
  --report "$tmp/report.json" >"$tmp/out" 2>&1 &
pid=$!
for _ in $(seq 300); do grep -q 'scenario "' "$tmp/out" && break; sleep 0.1; done  # awaiting it
grep -q 'scenario "' "$tmp/out" || fail "the run did not start within 30 s"
pgrep -f "$tmp/fusee-load-" >/dev/null || fail "no server of the tool's found under $tmp"
kill -TERM "$pid"
for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done  # awaiting its exit
kill -0 "$pid" 2>/dev/null && fail "fusee load still runs 30 s after SIGTERM"
wait "$pid"
rc=$?
pid=""
[ "$rc" -eq 143 ] || fail "exit status $rc, not 143"
grep -q 'stopped by SIGTERM: the run is cut short, no checks, no report' "$tmp/out" ||
  fail "no word of the stop"
grep -q ' started, .* completed in .* when stopped' "$tmp/out" || fail "no counts at the stop"
pgrep -f "$tmp/fusee-load-" >/dev/null && fail "the tool's server outlived it"
compgen -G "$tmp/fusee-load-*" >/dev/null && fail "the temporary directory is still there"
[ -e "$tmp/report.json" ] && fail "a report was written for a cut run"

# A run whose server's log fails ends at once, its check failed and its report written (the
# server the tool starts inherits the test hook: the fdatasync that takes a shard to LSN 20 fails).
SECONDS=0
FUSEE_TEST_FAIL_SYNC_AT_LSN=20 TMPDIR="$tmp" timeout 90 "$fusee" load --scenario "$scenario" \
  --duration-s 30 --rate 200 --report "$tmp/failed.json" >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "a run whose server's log failed exited $rc, not 1"
# (30 s of schedule and 30 s of drain otherwise, and 60 s of asking for the runs still going)
[ "$SECONDS" -le 40 ] || fail "a run whose server's log failed took $SECONDS s to end"
grep -qF "the server's log failed (a worker heard: shard " "$tmp/out" ||
  fail "no word of the failed log"
grep -qF "FAIL  the server's log never failed: a worker heard: shard " "$tmp/out" ||
  fail "no failed check for it"
[ -s "$tmp/failed.json" ] || fail "no report for the run"
compgen -G "$tmp/fusee-load-*" >/dev/null && fail "the temporary directory is still there"

# Refused before anything starts (exit 2, well within the 60 s a connect may take).
refused() {  # EXPECTED_TEXT ARGS...
  local want="$1"
  shift
  SECONDS=0
  TMPDIR="$tmp" timeout 20 "$fusee" load --scenario "$scenario" --duration-s 1 --rate 10 "$@" \
    >"$tmp/out" 2>&1
  local rc=$?
  [ "$rc" -eq 2 ] || fail "$* exited $rc, not 2"
  [ "$SECONDS" -le 3 ] || fail "$* took $SECONDS s to be refused"
  grep -qF "$want" "$tmp/out" || fail "$*: no '$want'"
  compgen -G "$tmp/fusee-load-*" >/dev/null && fail "$* left a temporary directory"
}
refused "the server address '127.0.0.1' (in --server / run.server \"127.0.0.1\") is not host:port" \
  --server 127.0.0.1
refused "is not host:port with a port from 1 to 65535" --server 127.0.0.1:7400,,127.0.0.1:7500
refused "the server address 127.0.0.1:7400 is given twice" --server 127.0.0.1:7400,127.0.0.1:7400
refused "\`run.name\` = \"../x\" must be 1 to 64 letters" --set run.name=../x
refused "nothing would run the workflows" --set workers.count=0
# (a bare value TOML reads as a number is a string for a key that takes one: the name passes)
refused "is not host:port" --set run.name=123 --server 127.0.0.1
mkdir "$tmp/a-directory"
refused "the report file $tmp/a-directory is a directory" --report "$tmp/a-directory"
echo "ok"
