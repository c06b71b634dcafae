#!/usr/bin/env bash
# Prints the path of a Python with the benchmark's peer libraries (pinned), creating the venv
# tmp/bench-venv first if needed. Used by the benchmark harness (bench/), which drives the
# peers through bench/peers/driver.py.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="$PWD/tmp/bench-venv"
pins="redis==8.1.0 python-redis-lock==4.0.1 redis-rw-lock==1.0.6"
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check $pins >&2
  echo "$pins" > "$venv/.pins"
fi
echo "$venv/bin/python"
