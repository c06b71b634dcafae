#!/usr/bin/env node
// The Node client against redlock v5 (on ioredis, one server), in make bench's hand-off and
// lapse scenarios (bench/README.md, scenarios 2 and 4), on a redis-server with the module that
// this script starts on a free loopback port.
//   node bench/redlock.mjs [--quick] [--out FILE]      (from node/, after npm run build)
// 2 contended hand-off: N writers on one key, each holding it 2 ms and asking again at once,
//   for a window; grants/s inside it, every request's wait (p50, p99, max), fairness (fewest /
//   most grants of one worker). Every worker has its own ioredis connection (as separate
//   processes would), all in this one process.
// 4 lease lapse: a holder takes the write lock with a 200 ms ttl and dies (stops renewing,
//   never releases); a waiter asks right after. How long after the holder's deadline (its
//   request's send time + ttl) is the waiter served?
import { writeFileSync } from "node:fs";
import os from "node:os";
import Redis from "ioredis";
import Redlock from "redlock";

import { RwLock } from "../dist/index.js";
import { Server, sleep } from "../test/servers.mjs";

const quick = process.argv.includes("--quick");
const outAt = process.argv.indexOf("--out");
const out = outAt > 0 ? process.argv[outAt + 1] : null;
const WRITERS = quick ? [2, 8] : [2, 8, 32];
const HOLD = 2;
const WINDOW = quick ? 1000 : 3000;
const GRACE = 3000;
const LAPSE_TTL = 200;
const TRIALS = quick ? 3 : 10;

const pct = (xs, p) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))];
};

// One contender: how to make a worker's lock, acquire it until a deadline, and release it.
const contenders = {
  "redis-lease": (port) => {
    const client = new Redis({ port, host: "127.0.0.1" });
    return {
      client,
      acquire: async (key, ttl, until) => {
        const lock = new RwLock(client, key, { ttl });
        const left = until - performance.now();
        return left > 0 ? lock.acquire("write", left) : null;
      },
      release: (g) => g.release(),
      die: (g) => g.abandon(),
    };
  },
  // redlock's own retries (defaults: 10 tries, 200 ms + up to 200 ms jitter apart), repeated
  // to the deadline; no automatic extension (acquire, not using).
  redlock: (port) => {
    const client = new Redis({ port, host: "127.0.0.1" });
    const redlock = new Redlock([client]);
    redlock.on("error", () => undefined);
    return {
      client,
      acquire: async (key, ttl, until) => {
        while (performance.now() < until) {
          try {
            return await redlock.acquire([key], ttl);
          } catch {
            // ExecutionError after its retries: ask again while the deadline allows
          }
        }
        return null;
      },
      release: (l) => l.release().catch(() => undefined),
      die: () => undefined,
    };
  },
};

async function handoff(port, name, n) {
  const key = `bench:node:s2:${name}:${n}`;
  const workers = Array.from({ length: n }, () => contenders[name](port));
  await Promise.all(workers.map((w) => w.client.ping()));
  const start = performance.now() + 50;
  const end = start + WINDOW;
  const waits = [];
  const starved = [];
  const grants = new Array(n).fill(0);
  let holds = 0;
  let held = 0;
  await Promise.all(
    workers.map(async (w, i) => {
      while (performance.now() < start) await sleep(1);
      while (performance.now() < end) {
        const asked = performance.now();
        const g = await w.acquire(key, 10_000, end + GRACE);
        const got = performance.now();
        if (g === null) {
          starved.push(got - asked);
          break;
        }
        waits.push(got - asked);
        if (got <= end) grants[i] += 1;
        await sleep(HOLD);
        holds += performance.now() - got;
        held += 1;
        await w.release(g);
      }
    }),
  );
  for (const w of workers) w.client.disconnect();
  const inWindow = grants.reduce((a, b) => a + b, 0);
  return {
    grantsPerSec: inWindow / (WINDOW / 1000),
    p50: pct(waits.concat(starved), 50),
    p99: pct(waits.concat(starved), 99),
    max: Math.max(...waits, ...starved),
    fairness: Math.max(...grants) === 0 ? 0 : Math.min(...grants) / Math.max(...grants),
    grants: inWindow,
    starved: starved.length,
    meanHold: holds / Math.max(held, 1),
  };
}

async function lapse(port, name) {
  const late = [];
  for (let t = 0; t < TRIALS; t++) {
    const key = `bench:node:s4:${name}:${t}`;
    const holder = contenders[name](port);
    const waiter = contenders[name](port);
    await Promise.all([holder.client.ping(), waiter.client.ping()]);
    const sent = performance.now();
    const g = await holder.acquire(key, LAPSE_TTL, performance.now() + 1000);
    holder.die(g);
    holder.client.disconnect(); // the holder is gone
    const w = await waiter.acquire(key, LAPSE_TTL, performance.now() + LAPSE_TTL + 2000);
    const got = performance.now();
    late.push(w === null ? null : got - (sent + LAPSE_TTL));
    if (w !== null) await waiter.release(w);
    waiter.client.disconnect();
  }
  const served = late.filter((x) => x !== null);
  return { p50: pct(served, 50), max: Math.max(...served), earliest: Math.min(...served), never: late.length - served.length };
}

const f = (x) => (Number.isNaN(x) ? "-" : x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2));

const server = await Server.start();
const lines = [];
const say = (s) => {
  lines.push(s);
  console.log(s);
};
try {
  const names = Object.keys(contenders);
  say(`### Node: redis-lease vs redlock ${(await import("redlock/package.json", { with: { type: "json" } }).catch(() => ({ default: { version: "5" } }))).default.version} (ioredis, one server${quick ? ", quick" : ""})`);
  say("");
  say(`Load average at the start: ${os.loadavg().map((x) => x.toFixed(1)).join(", ")} on ${os.availableParallelism()} CPUs.`);
  say("");
  say(`| case | metric | ${names.join(" | ")} |`);
  say(`|---|---|${names.map(() => "--:").join("|")}|`);
  for (const n of WRITERS) {
    const r = {};
    for (const name of names) r[name] = await handoff(server.port, name, n);
    const c = `2 hand-off: ${n} writers, hold ${HOLD} ms, ${WINDOW / 1000} s`;
    say(`| ${c} | grants/s | ${names.map((x) => f(r[x].grantsPerSec)).join(" | ")} |`);
    say(`| ${c} | wait p50 ms | ${names.map((x) => f(r[x].p50)).join(" | ")} |`);
    say(`| ${c} | wait p99 ms | ${names.map((x) => f(r[x].p99)).join(" | ")} |`);
    say(`| ${c} | wait max ms | ${names.map((x) => f(r[x].max)).join(" | ")} |`);
    say(`| ${c} | min/max grants per worker | ${names.map((x) => r[x].fairness.toFixed(3)).join(" | ")} |`);
    say(`| ${c} | never served | ${names.map((x) => r[x].starved).join(" | ")} |`);
    say(`| ${c} | mean hold ms (2 asked: the rest is a loaded event loop) | ${names.map((x) => f(r[x].meanHold)).join(" | ")} |`);
  }
  const l = {};
  for (const name of names) l[name] = await lapse(server.port, name);
  const c = `4 lapse: holder dies, ttl ${LAPSE_TTL} ms, ${TRIALS} trials`;
  say(`| ${c} | served after deadline p50 ms | ${names.map((x) => f(l[x].p50)).join(" | ")} |`);
  say(`| ${c} | served after deadline max ms | ${names.map((x) => f(l[x].max)).join(" | ")} |`);
  say(`| ${c} | earliest (negative: a lease cut short) ms | ${names.map((x) => f(l[x].earliest)).join(" | ")} |`);
  say(`| ${c} | never served | ${names.map((x) => l[x].never).join(" | ")} |`);
  if (out) writeFileSync(out, lines.join("\n") + "\n");
} finally {
  await server.stop();
}
