#!/usr/bin/env bash
# Starts (or stops) a local Redis Cluster of 3 masters and 3 replicas on 127.0.0.1, every node
# with the redis-lease module loaded.
#   scripts/cluster.sh start [BASE_PORT]   nodes on BASE_PORT..BASE_PORT+5 (default 7000)
#   scripts/cluster.sh stop  [BASE_PORT]
# Data and logs go to tmp/cluster-BASE_PORT/. Connect with: redis-cli -c -p BASE_PORT
set -euo pipefail
cd "$(dirname "$0")/.."
cmd=${1:-start}
base=${2:-7000}
dir="tmp/cluster-$base"
module="$PWD/target/release/libredis_lease.so"
server=${REDIS_SERVER:-redis-server}
ports=$(seq "$base" $((base + 5)))

case "$cmd" in
start)
  [ -f "$module" ] || { echo "build the module first: make"; exit 1; }
  mkdir -p "$dir"
  for p in $ports; do
    mkdir -p "$dir/$p"
    "$server" --port "$p" --bind 127.0.0.1 --dir "$PWD/$dir/$p" --daemonize yes \
      --pidfile "$PWD/$dir/$p/redis.pid" --logfile redis.log --save "" \
      --cluster-enabled yes --cluster-config-file nodes.conf --cluster-node-timeout 2000 \
      --appendonly yes --loadmodule "$module"
  done
  for p in $ports; do
    for _ in $(seq 50); do redis-cli -p "$p" PING >/dev/null 2>&1 && break; sleep 0.1; done
  done
  if [ "$(redis-cli -p "$base" CLUSTER INFO | tr -d '\r' | grep cluster_state)" != "cluster_state:ok" ]; then
    redis-cli --cluster create $(for p in $ports; do printf '127.0.0.1:%s ' "$p"; done) \
      --cluster-replicas 1 --cluster-yes >/dev/null
  fi
  for _ in $(seq 100); do
    redis-cli -p "$base" CLUSTER INFO | tr -d '\r' | grep -q cluster_state:ok && break; sleep 0.2
  done
  echo "cluster up on 127.0.0.1:$base-$((base + 5)); try: redis-cli -c -p $base RWLOCK.WLOCK mylock me 10000"
  ;;
stop)
  for p in $ports; do
    pidfile="$dir/$p/redis.pid"
    [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null || true
  done
  echo "cluster on $base stopped (data kept in $dir)"
  ;;
*)
  echo "usage: $0 start|stop [BASE_PORT]"; exit 1 ;;
esac
