#!/usr/bin/env bash
# `make bench`: every load scenario of bench/scenarios/ (or the one named) at its full length,
# each against a server `fusee load` starts; reports in BUILD_DIR/load-reports/<name>.json.
# Usage: bench/load.sh BUILD_DIR [SCENARIO]   (SCENARIO: a name such as steady, or a file)
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
BUILD=${1:-build}
ONLY=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$BUILD/load-reports"
if [ -n "$ONLY" ]; then
  if [ -f "$ONLY" ]; then files=("$ONLY"); else files=("$here/scenarios/$ONLY.toml"); fi
else
  files=("$here"/scenarios/*.toml)
fi
failed=0
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "bench: no scenario $f (see bench/scenarios/)" >&2; exit 2; }
  name=$(basename "$f" .toml)
  echo "== $name ($(nproc) cores, $(uname -r))"
  "$BUILD/app/fusee" load --scenario "$f" --report "$BUILD/load-reports/$name.json" || failed=1
done
exit $failed
