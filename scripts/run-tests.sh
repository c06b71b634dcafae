#!/usr/bin/env bash
# Runs the workspace's test binaries (as `cargo test --workspace` builds them; built first if
# needed) several at a time. Most of them spend their time waiting on servers (leases, waits,
# failovers), not on the CPU, so running a few side by side cuts the wall time without
# changing what any of them sees: each starts its own servers on free ports. Each binary's
# output is printed whole when it ends (in the order they end), then a summary.
#   scripts/run-tests.sh [-j N] [--package P]... [--test NAME]... [--skip NAME]...
#                        [--alone NAME]... [-- ARGS]
# -j N       binaries at once (default 4).
# --package  only the test binaries of package P (as in Cargo.toml: redis-lease, ...).
# --test     only binary NAME (a test target's name, or package:name).
# --skip     leave out binary NAME (a test target's name, or package:name).
# --alone    run binary NAME by itself, after the others (a CPU-heavy one, e.g. the bench's
#            smoke run, would otherwise load the machine under timing-sensitive tests).
# ARGS go to every binary (libtest's: --test-threads, a filter...). Every binary runs even
# after a failure; the exit status is 1 if any failed. A binary that runs past
# $RUN_TESTS_LIMIT seconds (default 900) is stopped and counts as failed.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=4
packages=()
only=()
skip=()
alone=()
while [ $# -gt 0 ]; do
  case "$1" in
    -j) jobs="$2"; shift 2 ;;
    --package) packages+=("$2"); shift 2 ;;
    --test) only+=("$2"); shift 2 ;;
    --skip) skip+=("$2"); shift 2 ;;
    --alone) alone+=("$2"); shift 2 ;;
    --) shift; break ;;
    *) echo "run-tests.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
limit="${RUN_TESTS_LIMIT:-900}"

# "package name dir executable" per test binary, the slowest first (they bound the wall time
# when they start last); names not listed keep cargo's order after them.
list=$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
wanted = set(sys.argv[1].split()) if sys.argv[1] else None
slow = """cluster_short cli smoke short holdback_model eviction sentinel review_holdback keyspace
clock chaos durability replicas cluster quarantine model lock bytes fuzz_ops roles multi
prometheus replication races""".split()
rows = []
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m["profile"]["test"]:
        continue
    # "path+file:///dir#name@version", or "...dir#version" when the name is the dir name.
    where, _, frag = m["package_id"].partition("#")
    pkg = frag.split("@")[0] if "@" in frag else where.rstrip("/").split("/")[-1]
    name = m["target"]["name"]
    rank = slow.index(name) if name in slow else len(slow)
    rows.append((rank, len(rows), pkg, name, os.path.dirname(m["manifest_path"]), m["executable"]))
for _, _, pkg, name, d, exe in sorted(rows):
    print(pkg, name, d, exe)
' "${packages[*]:-}")
if [ -z "$list" ]; then
  cargo test --workspace --no-run >&2
  echo "run-tests.sh: no test binary found" >&2
  exit 1
fi
if [ ${#packages[@]} -gt 0 ]; then
  list=$(awk -v want=" ${packages[*]} " 'index(want, " " $1 " ")' <<< "$list")
fi

out=$(mktemp -d "${TMPDIR:-/tmp}/run-tests.XXXXXX")
trap 'rm -rf "$out"' EXIT
listed() { # name package: whether NAME or PACKAGE:NAME is in the rest of the arguments
  local name=$1 pkg=$2; shift 2
  local x
  for x in "$@"; do [ "$x" = "$name" ] || [ "$x" = "$pkg:$name" ] && return 0; done
  return 1
}
start() { # id package name dir exe -- args
  local id=$1 pkg=$2 name=$3 dir=$4 exe=$5; shift 6
  (
    begun=$(date +%s)
    cd "$dir" && timeout --kill-after=30 "$limit" "$exe" "$@" < /dev/null > "$out/$id.log" 2>&1
    rc=$?
    [ "$rc" = 124 ] && echo "run-tests.sh: stopped after ${limit}s" >> "$out/$id.log"
    echo "$rc $(( $(date +%s) - begun )) $pkg $name $exe" > "$out/$id.done"
  ) &
}
failed=()
summary=()
report() { # prints every binary that ended and was not printed yet
  local f id rc secs pkg name exe
  for f in "$out"/*.done; do
    [ -e "$f" ] || continue
    id=$(basename "$f" .done)
    read -r rc secs pkg name exe < "$f"
    echo "     Running $pkg:$name ($exe)"
    cat "$out/$id.log"
    summary+=("$(printf '%5ss  %-4s %s:%s' "$secs" "$([ "$rc" = 0 ] && echo ok || echo FAIL)" "$pkg" "$name")")
    [ "$rc" = 0 ] || failed+=("$pkg:$name")
    rm -f "$f" "$out/$id.log"
  done
}
pool() { # runs the rows on stdin, at most $1 at once
  local width=$1 id pkg name dir exe
  shift
  while read -r pkg name dir exe; do
    [ -n "$pkg" ] || continue
    while [ "$(jobs -rp | wc -l)" -ge "$width" ]; do
      wait -n 2>/dev/null || true
      report
    done
    id=$((++n))
    start "$id" "$pkg" "$name" "$dir" "$exe" -- "$@"
  done
  wait
  report
}
n=0
together=""
by_itself=""
while read -r pkg name dir exe; do
  listed "$name" "$pkg" "${skip[@]+"${skip[@]}"}" && continue
  if [ ${#only[@]} -gt 0 ] && ! listed "$name" "$pkg" "${only[@]}"; then continue; fi
  if listed "$name" "$pkg" "${alone[@]+"${alone[@]}"}"; then
    by_itself+="$pkg $name $dir $exe"$'\n'
  else
    together+="$pkg $name $dir $exe"$'\n'
  fi
done <<< "$list"
began=$(date +%s)
pool "$jobs" "$@" <<< "$together"
pool 1 "$@" <<< "$by_itself"
echo
echo "run-tests.sh: $(( $(date +%s) - began ))s, $jobs at once; each binary's time:"
printf '%s\n' "${summary[@]}" | sort -rn
if [ ${#failed[@]} -gt 0 ]; then
  echo "run-tests.sh: failed: ${failed[*]}" >&2
  exit 1
fi
