#!/usr/bin/env bash
# npm pack, installed with ioredis (and TypeScript, for `await using` on Node < 24) into a fresh
# project outside the repository, then the README's example against a server with the module.
#   node/test/pack.sh [PORT]   (PORT: a server with the module; default: one started here)
set -euo pipefail
cd "$(dirname "$0")/.."
tgz="$PWD/$(npm pack --silent | tail -1)"
proj=$(mktemp -d /tmp/redis-lease-pack-XXXXXX)
trap 'rm -rf "$proj" "$tgz"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null || true' EXIT
cp test/pack/example.ts "$proj/"
cd "$proj"
npm init -y >/dev/null
npm pkg set type=module >/dev/null
npm install --no-audit --no-fund --loglevel=error "$tgz" "ioredis@${IOREDIS:-5}" typescript@~5.9 @types/node@20 >/dev/null
npx tsc --target es2022 --module esnext --moduleResolution bundler --lib es2022,esnext.disposable \
  --strict --skipLibCheck example.ts
port=${1:-}
if [ -z "$port" ]; then
  port=$(node -e 's=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --loadmodule "$OLDPWD/../target/release/libredis_lease.so" >/dev/null &
  pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
fi
out=$(PORT=$port node example.js)
echo "$out"
# The example ran to its end: the fenced write landed and nothing was left held.
grep -qx "status shipped function function" <<<"$out"
grep -qx "tryWrite after the scope guard" <<<"$out"
