#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks, through apt-get when running as root; otherwise
# says what is missing.
#   scripts/deps.sh        to build and run: cargo, redis-server, libclang-dev (bindgen)
#   scripts/deps.sh test   also for make test, make test-valkey and make valgrind: pip, valgrind,
#                          prometheus and prometheus-redis-exporter (tests/prometheus.rs)
#   scripts/deps.sh python also for the Python client's tests (make test-python): venv
set -euo pipefail
command -v cargo >/dev/null 2>&1 || { echo "cargo is missing: install Rust from rustup.rs"; exit 1; }
missing=""
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
if command -v dpkg >/dev/null 2>&1; then
  dpkg -s libclang-dev >/dev/null 2>&1 || missing="$missing libclang-dev"
else
  ls /usr/lib/llvm-*/lib/libclang*.so >/dev/null 2>&1 || missing="$missing libclang-dev"
fi
if [ "${1:-}" = test ]; then
  python3 -m pip --version >/dev/null 2>&1 || missing="$missing python3-pip"
  command -v valgrind >/dev/null 2>&1 || missing="$missing valgrind"
  command -v prometheus >/dev/null 2>&1 || missing="$missing prometheus"
  command -v prometheus-redis-exporter >/dev/null 2>&1 || missing="$missing prometheus-redis-exporter"
fi
if [ "${1:-}" = python ]; then
  # Debian's python3 makes venvs with pip only with python3-venv (it holds ensurepip).
  python3 -c "import ensurepip, venv" >/dev/null 2>&1 || missing="$missing python3-venv"
fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
  echo "missing:$missing -- install them (e.g. sudo apt-get install$missing) and run make again"
  exit 1
fi
