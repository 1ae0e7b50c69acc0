#!/usr/bin/env bash
# Installs the Debian 12 packages that building, running and testing Fusee need.
# Skips what is present; runs `apt-get update` at most once, and only if something is missing.
set -euo pipefail

packages=(
  # toolchain
  g++ make cmake pkg-config
  # libraries the server links
  libcaf-dev libcurl4-openssl-dev libssl-dev libsimdjson-dev
  libmicrohttpd-dev libtomlplusplus-dev libcli11-dev libspdlog-dev
  # the workflow runtime's user-facing JSON value type
  nlohmann-json3-dev
  # tests: doctest, the independent HMAC check (python3), certificates (openssl CLI)
  doctest-dev python3 openssl
  # tests of the admin server: `promtool check metrics` (prometheus) and the dashboard in a
  # headless browser (chromium)
  prometheus chromium
  # make fuzz / make test-asan: clang with libFuzzer and the sanitizer runtimes
  clang libclang-rt-14-dev
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root (or: sudo apt-get install ${missing[*]})" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
