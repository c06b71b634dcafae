#!/usr/bin/env bash
# Installs what a fresh Debian machine lacks, through apt-get when running as root; otherwise
# says what is missing.
#   scripts/deps.sh        to build and run: cargo, redis-server, libclang-dev (bindgen)
#   scripts/deps.sh test   also for make test, make test-valkey and make valgrind: pip, valgrind,
#                          prometheus and prometheus-redis-exporter (tests/prometheus.rs)
#   scripts/deps.sh python also for the Python client's tests (make test-python): venv
#   scripts/deps.sh node   also for the Node client (make test-node, make lint): node >= 20 and
#                          npm, then node/node_modules from node/package-lock.json (npm ci)
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
if [ "${1:-}" = node ]; then
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    missing="$missing nodejs npm"
  elif [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
    echo "node $(node --version) is too old for the Node client: install Node.js 20 or later"; exit 1
  fi
fi
node_modules() {
  # npm ci only when node/package-lock.json changed since the last install (npm keeps a copy).
  [ "${1:-}" = node ] || return 0
  local dir
  dir="$(cd "$(dirname "$0")/.." && pwd)/node"
  if [ ! -f "$dir/node_modules/.package-lock.json" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules/.package-lock.json" ]; then
    (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
  fi
}
if [ -z "$missing" ]; then node_modules "${1:-}"; exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing:$missing"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  node_modules "${1:-}"
else
  echo "missing:$missing -- install them (e.g. sudo apt-get install$missing) and run make again"
  exit 1
fi
