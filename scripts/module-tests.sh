#!/usr/bin/env bash
# Runs the module's own test binaries (the root package's unit and integration tests) as
# `cargo test --workspace` built them, so that running them again on another server builds
# nothing: `cargo test -p redis-lease` would resolve dependency features for that package
# alone and rebuild a minute's worth of crates.
#   scripts/module-tests.sh [--test NAME]... [-- ARGS to every test binary]
# With no --test, every binary of the package runs (unit tests too). Every binary runs even
# after a failure; the exit status is 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --test) names+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "module-tests.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
root="$PWD/Cargo.toml"
list=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, sys
root, names = sys.argv[1], set(sys.argv[2:])
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if m.get("manifest_path") != root or not m["profile"]["test"]:
        continue
    if names and not ("test" in t["kind"] and t["name"] in names):
        continue
    print(t["name"] + " " + m["executable"])
' "$root" "${names[@]}")
if [ -z "$list" ]; then
  # Show why (a build error, or no such test).
  cargo test --workspace --no-run >&2
  echo "module-tests.sh: no test binary found for: ${names[*]:-the module}" >&2
  exit 1
fi
failed=()
while read -r name exe; do
  echo "     Running $name ($exe)"
  "$exe" "$@" || failed+=("$name")
done <<< "$list"
if [ ${#failed[@]} -gt 0 ]; then
  echo "module-tests.sh: failed: ${failed[*]}" >&2
  exit 1
fi
