#!/usr/bin/env bash
# `make bench`: every load scenario of bench/scenarios/ (or the one named) at its full length,
# each against a server `fusee load` starts; reports in BUILD_DIR/load-reports/<name>.json and
# their timelines plotted to <name>.png (bench/plot_load.py, matplotlib).
# Usage: bench/load.sh BUILD_DIR [SCENARIO]   (SCENARIO: a name such as steady, or a file)
set -euo pipefail
ulimit -n 65536 2>/dev/null || true
BUILD=${1:-build}
ONLY=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$BUILD/load-reports"
# The plots need matplotlib (benchmarks only: make test does not install it).
if ! dpkg-query -W -f='${Status}' python3-matplotlib 2>/dev/null | grep -q '^install ok installed$'; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends python3-matplotlib
fi
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
  # Debian's python (with Debian's matplotlib), whatever python3 is first on PATH
  /usr/bin/python3 "$here/plot_load.py" "$BUILD/load-reports/$name.json" "$BUILD/load-reports/$name.png" || true
done
exit $failed
