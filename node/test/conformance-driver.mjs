#!/usr/bin/env node
// The Node client's conformance driver: JSON lines on stdin/stdout (conformance/PROTOCOL.md),
// each request done through redis-lease's public API. Needs node/dist (npm run build).
import readline from "node:readline";
import Redis from "ioredis";

import * as rl from "../dist/index.js";

function line(obj) {
  // Tokens are bigints: written as JSON integers, every digit kept.
  return JSON.stringify(obj, (_k, v) => (typeof v === "bigint" ? `__big__${v}` : v)).replace(/"__big__(\d+)"/g, "$1");
}

function emit(obj) {
  process.stdout.write(line(obj) + "\n");
}

function kindOf(e) {
  const table = [
    [rl.ModuleNotLoaded, "module_not_loaded"],
    [rl.TtlRefused, "ttl_too_long"],
    [rl.LimitMismatch, "limit"],
    [rl.PermitsMismatch, "permits"],
    [rl.Fenced, "fenced"],
    [rl.LeaseLost, "lease_lost"],
    [rl.Deadlock, "deadlock"],
    [rl.LockGone, "lock_gone"],
    [rl.NotAcquired, "not_acquired"],
    [rl.ProtocolError, "protocol"],
    [rl.ConnectionFailed, "connection"],
    [rl.Unavailable, "unavailable"],
    [RangeError, "invalid"],
    [TypeError, "invalid"],
  ];
  for (const [cls, name] of table) if (e instanceof cls) return name;
  return "other";
}

// The protocol's reasons: the Node client's "fenced" is a revocation, "not-replicated" and
// "max-hold" are its own.
const REASON = { expired: "expired", revoked: "revoked", fenced: "revoked", failed: "failed" };
const reasonOf = (g) => (g.lost === null ? "released" : (REASON[g.lost.reason] ?? g.lost.reason));

class Driver {
  client = null;
  guards = new Map();
  n = 0;

  connect(url) {
    if (this.client !== null) this.client.disconnect();
    if (url.startsWith("redis+sentinel://")) {
      const u = new URL(url.replace("redis+sentinel://", "http://"));
      const hosts = url.slice("redis+sentinel://".length).split("/")[0].split(",");
      const sentinels = hosts.map((h) => ({ host: h.slice(0, h.lastIndexOf(":")), port: Number(h.slice(h.lastIndexOf(":") + 1)) }));
      this.client = new Redis({ sentinels, name: u.pathname.replace(/^\//, "") || "mymaster", lazyConnect: true });
    } else {
      this.client = new Redis(url, { lazyConnect: true });
    }
    this.client.on("error", () => undefined);
    return {};
  }

  async acquire(req) {
    const ttl = req.ttl_ms;
    const wait = req.wait_ms;
    const timeout = wait === null || wait === undefined ? undefined : wait;
    const owner = req.owner ?? undefined;
    const n = ++this.n;
    const h = `h${n}`;
    const onLost = (e) => emit({ event: "lost", handle: h, reason: REASON[e.reason] ?? e.reason });
    let g;
    if (req.kind === "read" || req.kind === "write") {
      const lock = new rl.RwLock(this.client, req.key, { ttl, owner, onLost });
      if (timeout === 0) g = req.kind === "write" ? await lock.tryWrite() : await lock.tryRead();
      else g = await lock.acquire(req.kind, timeout ?? null);
    } else if (req.kind === "semaphore") {
      const sem = new rl.Semaphore(this.client, req.key, { limit: req.limit, ttl, owner, onLost });
      const permits = req.permits ?? 1;
      if (timeout === 0) g = await sem.tryAcquire({ permits });
      else g = await sem.acquire({ permits, timeout }).catch((e) => (e instanceof rl.NotAcquired ? null : Promise.reject(e)));
    } else if (req.kind === "leader") {
      const el = new rl.LeaderElector(this.client, req.key, { ttl, candidate: owner, onLost });
      if (timeout === 0) g = await el.tryLead();
      else g = await el.campaign({ timeout }).catch((e) => (e instanceof rl.NotAcquired ? null : Promise.reject(e)));
    } else {
      throw new RangeError(`unknown kind ${req.kind}`);
    }
    if (g === null) return { granted: false };
    this.guards.set(h, g);
    return { handle: h, token: g.token };
  }

  async handle(req) {
    const op = req.op;
    if (op === "hello") return { client: "node", version: "0.1.0", capabilities: ["sentinel"] };
    if (op === "connect") return this.connect(req.url);
    if (op === "acquire") return this.acquire(req);
    if (op === "command") {
      const [cmd, ...args] = req.command;
      return { reply: await this.client.call(cmd, ...args) };
    }
    const g = this.guards.get(req.handle);
    if (g === undefined) throw new RangeError(`no handle ${req.handle}`);
    if (op === "status") {
      const held = g.held;
      return { held, reason: held ? null : reasonOf(g) };
    }
    if (op === "wait_lost") {
      const t = performance.now();
      const lost = await g.waitLost(req.timeout_ms);
      const out = { lost, elapsed_ms: Math.round(performance.now() - t) };
      if (lost) out.reason = reasonOf(g);
      return out;
    }
    if (op === "end") {
      // What leaving an `await using` scope does.
      await g[Symbol.asyncDispose]();
      return {};
    }
    if (op === "release") return { released: await g.release() };
    if (op === "exec") {
      const [cmd, ...args] = req.command;
      return { reply: await g.exec(cmd, ...args) };
    }
    const e = new Error(`unsupported op ${op}`);
    e.unsupported = true;
    throw e;
  }
}

const d = new Driver();
const input = readline.createInterface({ input: process.stdin });
for await (const text of input) {
  if (!text.trim()) continue;
  const req = JSON.parse(text);
  if (req.op === "quit") break;
  try {
    const res = await d.handle(req);
    emit({ id: req.id, ok: true, ...res });
  } catch (e) {
    const kind = e?.unsupported ? "unsupported" : kindOf(e);
    emit({ id: req.id, ok: false, error: { kind, message: e instanceof Error ? e.message : String(e) } });
  }
}
// Leave held guards held: the harness decides what the end looks like.
process.exit(0);
