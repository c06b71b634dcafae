#!/usr/bin/env bash
# Runs integration tests with every redis-server under valgrind, stopping servers gracefully so
# leaks are reported, then fails if any report points into the module.
#   scripts/valgrind-check.sh [--test NAME... -- test args]   (default: the commands and
#   durability tests); the test binary always gets --test-threads 2.
set -uo pipefail
cd "$(dirname "$0")/.."
export VALGRIND_LOG_DIR="$PWD/tmp/valgrind"
rm -rf "$VALGRIND_LOG_DIR"; mkdir -p "$VALGRIND_LOG_DIR"
args=("$@")
# Timing-sensitive tests are skipped: under valgrind the server runs ~20x slower, and this run
# is about memory errors, not latency.
[ ${#args[@]} -eq 0 ] && args=(--test commands --test durability -- --skip keyspace_notifications_announce_every_lapse \
  --skip aof_fsync_always_kill9_restart_keeps_live_holds_and_drops_lapsed \
  --skip aof_rewrite_with_rdb_preamble_then_restart_keeps_state)
case " ${args[*]} " in *" -- "*) ;; *) args+=(--) ;; esac
REDIS_SERVER="$PWD/scripts/valgrind-server.sh" REDIS_LEASE_GRACEFUL=1 REDIS_LEASE_SLOW=1 \
  scripts/run-tests.sh -j 1 --package redis-lease "${args[@]}" --test-threads 2
status=$?
logs=$(ls "$VALGRIND_LOG_DIR"/vg-*.log 2>/dev/null | wc -l)
# A report block is blank-line separated; keep those that name the module.
bad=$(awk -v RS= '/redis_lease|redis_module/ && /(Invalid|uninitialised|definitely lost|indirectly lost|Mismatched)/' "$VALGRIND_LOG_DIR"/vg-*.log 2>/dev/null)
echo "valgrind: $logs server logs in $VALGRIND_LOG_DIR"
if [ -n "$bad" ]; then
  echo "valgrind found errors in the module:"; echo "$bad" | head -80
  exit 1
fi
echo "valgrind: no invalid access, uninitialised read or leak in the module's code"
exit $status
