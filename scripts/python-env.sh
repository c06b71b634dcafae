#!/usr/bin/env bash
# Creates (or refreshes) a venv under tmp/ with the Python client installed from ./python (as
# `pip install ./python[test]` does, so the packaging is what gets tested) and its test tools;
# the machine's Python stays untouched. Reinstalls only when python/ changed, without network
# then (build isolation off: setuptools is already in the venv). Prints the venv's python.
#   scripts/python-env.sh            (PYTHON=python3, PYTHON_VENV=tmp/venv)
set -euo pipefail
cd "$(dirname "$0")/.."
py=${PYTHON:-python3}
venv=${PYTHON_VENV:-tmp/venv}
pip() { "$venv/bin/python" -m pip --disable-pip-version-check -q "$@" >&2; }
if [ ! -x "$venv/bin/python" ]; then
  "$py" -m venv "$venv" >&2 || { echo "cannot create a venv with $py: install python3-venv (scripts/deps.sh python)" >&2; exit 1; }
  pip install "setuptools>=61" wheel
fi
# ruff for make lint (ruff check, ruff format --check on python/ and conformance/).
"$venv/bin/python" -m ruff --version >/dev/null 2>&1 || pip install "ruff>=0.6"
stamp="$venv/.redis-lease-python"
sum=$(find python/pyproject.toml python/README.md python/src -type f ! -path '*/__pycache__/*' ! -path '*.egg-info*' -print0 \
  | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]; then
  pip install --no-build-isolation "./python[test]"
  rm -rf python/build python/src/*.egg-info
  echo "$sum" > "$stamp"
fi
echo "$(cd "$venv" && pwd)/bin/python"
