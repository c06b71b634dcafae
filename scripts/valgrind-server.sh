#!/usr/bin/env bash
# redis-server under valgrind, for the test suite: REDIS_SERVER=scripts/valgrind-server.sh.
# Each server writes VALGRIND_LOG_DIR/vg-<pid>.log (default tmp/valgrind).
set -euo pipefail
dir=${VALGRIND_LOG_DIR:-$(cd "$(dirname "$0")/.." && pwd)/tmp/valgrind}
mkdir -p "$dir"
exec valgrind --quiet --leak-check=full --show-leak-kinds=definite,indirect \
  --errors-for-leak-kinds=definite --num-callers=30 \
  --log-file="$dir/vg-%p.log" "${VALGRIND_REDIS:-redis-server}" "$@"
