#!/usr/bin/env bash
# `make run`: a server for local development in ./data, with the HTTP API on 127.0.0.1:7402 and
# one invocation endpoint, `fusee handler` on 127.0.0.1:9000 (start it as docs/tutorial.md shows;
# until then the invoker backs off). The endpoint's secret is made once, in data/handler.secret.
# Usage: run-local.sh BUILD_DIR [server options...]
set -euo pipefail
build="$1"
shift
mkdir -p data
if [ ! -s data/handler.secret ]; then
  (umask 077 && od -An -N32 -tx1 /dev/urandom | tr -d ' \n' > data/handler.secret)
fi
if [ ! -f data/fusee-local.toml ]; then
  cat > data/fusee-local.toml <<'TOML'
# Written by `make run` (scripts/run-local.sh) once; edit freely. Paths are relative to this file.
[server]
data_dir = "."

[[endpoint]]
url = "http://127.0.0.1:9000/invoke"
secret_file = "handler.secret"
TOML
fi
exec "$build/app/fusee" server --config data/fusee-local.toml "$@"
