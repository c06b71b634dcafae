#!/usr/bin/env bash
# The server's instructions per lock + unlock pair, counted by callgrind (repeatable on a noisy
# machine, unlike timings): the SET NX PX + DEL floor and the module's three pairs, each
# 20,000 pairs on fresh keys through one pipelined connection, counted only while they run.
#   scripts/callgrind-pairs.sh [--replica] [--calls] [module.so]
# --replica attaches one replica (not under valgrind) to the measured server. The module is
# loaded for every row, the floor's included, so the floor pays the module's keyspace-event
# subscription as the module's pairs do. $REDIS_SERVER picks the server (default redis-server).
# Each pair is then split (scripts/callgrind-attribute.py): the module's own instructions (the
# figure to compare between builds: the whole pair moves by a few hundred with how the event
# loop happened to read the pipeline), those it spends in calls out of it (RedisModule_*,
# libc), and the rest of the server. --calls lists each call for the WLOCK pair.
# Needs valgrind, redis-server, redis-cli, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
replica=0
calls=0
while [ $# -gt 0 ]; do
  case "$1" in
    --replica) replica=1; shift ;;
    --calls) calls=1; shift ;;
    *) break ;;
  esac
done
module=$(realpath "${1:-target/release/libredis_lease.so}")
pairs=20000
server="${REDIS_SERVER:-redis-server}"
work=$(mktemp -d "${TMPDIR:-/tmp}/callgrind-pairs.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# RESP files: warm-up, then one per workload.
python3 - "$work" "$pairs" <<'EOF'
import sys
out, pairs = sys.argv[1], int(sys.argv[2])
owner = "0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b"
def cmd(*args):
    return "*%d\r\n" % len(args) + "".join("$%d\r\n%s\r\n" % (len(a), a) for a in args)
work = {
    "floor": lambda k: cmd("SET", k, owner, "PX", "60000", "NX") + cmd("DEL", k),
    "wlock": lambda k: cmd("RWLOCK.WLOCK", k, owner, "60000") + cmd("RWLOCK.UNLOCK", k, owner),
    "rlock": lambda k: cmd("RWLOCK.RLOCK", k, owner, "60000") + cmd("RWLOCK.UNLOCK", k, owner),
    "campaign": lambda k: cmd("LEADER.CAMPAIGN", k, owner, "60000") + cmd("LEADER.RESIGN", k, owner),
}
with open(f"{out}/warm.resp", "w") as f:
    for i in range(1000):
        for w in work.values():
            f.write(w("w:%06d" % i))
for name, w in work.items():
    with open(f"{out}/{name}.resp", "w") as f:
        for i in range(pairs):
            f.write(w("k:%06d" % i))
EOF

printf '%-9s %15s %12s\n' workload instructions per-pair
floor=""
for w in floor wlock rlock campaign; do
  port=$(free_port)
  out="$work/callgrind.$w"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
    "$server" --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$work" --loadmodule "$module" > "$work/vg-$w.log" 2>&1 &
  vpid=$!; pids+=("$vpid")
  for _ in $(seq 150); do redis-cli -p "$port" ping > /dev/null 2>&1 && break; sleep 0.2; done
  if [ "$replica" = 1 ]; then
    rport=$(free_port)
    mkdir -p "$work/replica-$w"
    "$server" --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$work/replica-$w" --loadmodule "$module" --replicaof 127.0.0.1 "$port" \
      > "$work/replica-$w.log" 2>&1 &
    rpid=$!; pids+=("$rpid")
    for _ in $(seq 300); do
      redis-cli -p "$rport" info replication 2>/dev/null | grep -q master_link_status:up && break
      sleep 0.2
    done
  fi
  redis-cli -p "$port" --pipe < "$work/warm.resp" > /dev/null
  callgrind_control -i on "$vpid" > /dev/null 2>&1
  redis-cli -p "$port" --pipe < "$work/$w.resp" > /dev/null
  callgrind_control -i off "$vpid" > /dev/null 2>&1
  if [ "$replica" = 1 ]; then kill "$rpid"; wait "$rpid" 2>/dev/null || true; fi
  redis-cli -p "$port" shutdown nosave > /dev/null 2>&1 || true
  wait "$vpid" 2>/dev/null || true
  ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !n++ { gsub(",", "", $1); print $1 }')
  [ -n "$floor" ] || floor=$ir
  printf '%-9s %15s %12s   %.3fx of the floor\n' "$w" "$ir" "$((ir / pairs))" \
    "$(python3 -c "print($floor / $ir)")"
done

echo
printf '%-9s %12s %12s %12s\n' workload module-own module-calls rest-of-server
for w in wlock rlock campaign; do
  python3 scripts/callgrind-attribute.py "$work/callgrind.$w" "$module" "$pairs" --top 0 |
    awk -v w="$w" '/its own code/ {o=$NF} /in calls out/ {c=$NF} /rest of the server/ {r=$NF}
      END {printf "%-9s %12s %12s %12s\n", w, o, c, r}'
done
if [ "$calls" = 1 ]; then
  echo
  echo "wlock, per pair:"
  python3 scripts/callgrind-attribute.py "$work/callgrind.wlock" "$module" "$pairs" --top 40
fi
