// RwLock against one real server: exclusion, hand-off inside the server, tokens, fenced exec,
// release, await-using disposal, AbortSignal, losses (deletion, a frozen server) and their
// signal, onLost and the end-of-scope LeaseLost, and that the caller's client is never held up.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import Redis from "ioredis";

import { Fenced, LeaseLost, NotAcquired, RwLock } from "../dist/index.js";
import { Server, sleep, until } from "./servers.mjs";

let server;
let redis;
before(async () => {
  server = await Server.start();
  redis = new Redis({ port: server.port, host: "127.0.0.1" });
});
after(async () => {
  redis.disconnect();
  await server.stop();
});

const FAST = { baseDelay: 10, maxDelay: 200, budget: 10_000 };

describe("RwLock", () => {
  test("a writer excludes readers and writers; readers share; tokens are bigints that grow", async () => {
    const lock = new RwLock(redis, "l:excl", { ttl: 3000 });
    const w = await lock.write({ timeout: 1000 });
    assert.equal(typeof w.token, "bigint");
    assert.equal(await lock.tryRead(), null);
    assert.equal(await lock.tryWrite(), null);
    assert.equal(await w.release(), true);
    assert.equal(await w.release(), false, "a second release is harmless");
    const r1 = await lock.read({ timeout: 1000 });
    const r2 = await lock.tryRead();
    assert.ok(r2 !== null && r2.token > w.token);
    assert.equal(await lock.tryWrite(), null);
    const info = await lock.info();
    assert.equal(info.mode, "read");
    assert.deepEqual(info.holders.map((h) => h.token).sort(), [r1.token, r2.token].sort());
    await r1.release();
    await r2.release();
    assert.equal((await lock.info()).mode, null);
  });

  test("a waiting writer is handed the lock inside the server at release, and the caller's client is not held up", async () => {
    const lock = new RwLock(redis, "l:handoff", { ttl: 3000 });
    const first = await lock.write();
    const t0 = performance.now();
    const waiting = lock.write({ timeout: 10_000 });
    await sleep(100);
    // The wait is parked on a connection of the package's own: the caller's answers at once.
    const p0 = performance.now();
    assert.equal(await redis.ping(), "PONG");
    assert.ok(performance.now() - p0 < 500);
    assert.equal((await lock.info()).waiters, 1);
    setTimeout(() => void first.release(), 200);
    const second = await waiting;
    const waited = performance.now() - t0;
    assert.ok(waited >= 200 && waited < 2000, `handed off after ${waited} ms`);
    assert.ok(second.token > first.token);
    await second.release();
  });

  test("a timeout that runs out throws NotAcquired and leaves nothing queued", async () => {
    const lock = new RwLock(redis, "l:timeout", { ttl: 3000 });
    const g = await lock.write();
    const t0 = performance.now();
    await assert.rejects(lock.write({ timeout: 300 }), NotAcquired);
    assert.ok(performance.now() - t0 >= 290);
    assert.equal((await lock.info()).waiters, 0);
    await g.release();
  });

  test("an AbortSignal cancels a wait: rejected with its reason, the waiter leaves the queue", async () => {
    const lock = new RwLock(redis, "l:abort", { ttl: 3000 });
    const g = await lock.write();
    const ac = new AbortController();
    const waiting = lock.write({ timeout: 30_000, signal: ac.signal });
    await until(2000, "the waiter to queue", async () => (await lock.info()).waiters === 1);
    ac.abort(new Error("changed my mind"));
    await assert.rejects(waiting, /changed my mind/);
    await until(2000, "the waiter to leave", async () => (await lock.info()).waiters === 0);
    await g.release();
    const again = await lock.tryWrite();
    assert.ok(again !== null, "nobody else holds it");
    await again.release();
  });

  test("exec runs fenced by Redis; after the hold is gone it throws Fenced and runs nothing", async () => {
    const lock = new RwLock(redis, "l:exec", { ttl: 3000 });
    const g = await lock.write();
    assert.equal(await g.exec("SET", "l:exec:data", "v1"), "OK");
    assert.equal(await redis.get("l:exec:data"), "v1");
    await redis.call("RWLOCK.UNLOCK", "l:exec", g.owner);
    await assert.rejects(g.exec("SET", "l:exec:data", "v2"), Fenced);
    assert.equal(await redis.get("l:exec:data"), "v1");
    assert.equal(g.held, false);
    assert.equal(g.signal.aborted, true);
    assert.equal(g.signal.reason.reason, "fenced");
    await g.release();
  });

  test("the watchdog renews: a guard outlives its ttl many times over", async () => {
    const lock = new RwLock(redis, "l:renew", { ttl: 300 });
    const g = await lock.write();
    await sleep(1200);
    assert.equal(g.held, true);
    assert.equal((await lock.info()).holders[0].token, g.token);
    await g.release();
  });

  test("a revoked lease aborts the signal with a LeaseLost reason, calls onLost, and the scope's end throws it", async () => {
    const lost = [];
    const lock = new RwLock(redis, "l:revoked", { ttl: 600, onLost: (e) => lost.push(e) });
    const g = await lock.write();
    await redis.del("l:revoked");
    await until(2000, "the watchdog to notice", () => g.signal.aborted);
    assert.ok(g.signal.reason instanceof LeaseLost);
    assert.equal(g.signal.reason.reason, "revoked");
    assert.equal(lost.length, 1);
    assert.throws(() => g.check(), LeaseLost);
    await assert.rejects(g[Symbol.asyncDispose](), (e) => e instanceof LeaseLost && e.reason === "revoked");
    // Opted out: the scope ends quietly.
    const quiet = await new RwLock(redis, "l:revoked2", { ttl: 600, throwOnLost: false }).write();
    await redis.del("l:revoked2");
    await until(2000, "the watchdog to notice", () => quiet.signal.aborted);
    await quiet[Symbol.asyncDispose]();
  });

  test("a held scope disposes by releasing", async () => {
    const lock = new RwLock(redis, "l:dispose", { ttl: 3000 });
    const g = await lock.write();
    await g[Symbol.asyncDispose]();
    assert.equal(g.held, false);
    assert.equal((await lock.info()).mode, null);
  });

  test("a frozen server: held turns false at the lease's bound, before the server's lease ends; the signal says expired", async () => {
    const s = await Server.start();
    const r = new Redis({ port: s.port, host: "127.0.0.1", lazyConnect: true });
    try {
      const lock = new RwLock(r, "l:frozen", { ttl: 1500, commandTimeout: 300, retry: FAST });
      const g = await lock.write();
      s.freeze();
      const bound = g.validUntil;
      // The bound is at most send time + ttl - margin: before the server's deadline.
      assert.ok(bound !== null && bound - performance.now() <= 1500 - 15 + 1);
      await until(3000, "the bound to pass", () => performance.now() > bound + 1, 5);
      assert.equal(g.held, false, "computed from the clock, whatever the timers");
      await until(3000, "the signal", () => g.signal.aborted);
      s.thaw();
      assert.equal(g.signal.reason.reason, "expired");
      await assert.rejects(g[Symbol.asyncDispose](), LeaseLost);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  test("maxHold gives the hold back with reason max-hold", async () => {
    const lock = new RwLock(redis, "l:maxhold", { ttl: 3000 });
    const g = await lock.write({ maxHold: 300 });
    await until(2000, "max hold", () => g.signal.aborted);
    assert.equal(g.signal.reason.reason, "max-hold");
    await until(2000, "the hold given back", async () => (await lock.info()).mode === null);
  });

  test("a caller-chosen owner is reentrant", async () => {
    const lock = new RwLock(redis, "l:owner", { ttl: 3000, owner: "worker-1" });
    const a = await lock.write();
    const b = await lock.write({ timeout: 500 });
    assert.equal(a.token, b.token);
    assert.equal((await lock.info()).holders[0].count, 2);
    await b.release();
    await a.release();
    assert.equal((await lock.info()).mode, null);
  });
});
