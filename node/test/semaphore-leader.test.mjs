// Semaphore and LeaderElector against one real server: permits, fairness, hand-off, terms.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import Redis from "ioredis";

import { LeaderElector, NotAcquired, Semaphore } from "../dist/index.js";
import { Server, sleep } from "./servers.mjs";

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

describe("Semaphore", () => {
  test("at most limit permits at once; a waiter needing more is served when enough are freed", async () => {
    const sem = new Semaphore(redis, "s:api", { limit: 3, ttl: 3000 });
    const two = await sem.acquire({ permits: 2 });
    const one = await sem.tryAcquire();
    assert.ok(one !== null);
    assert.equal(await sem.tryAcquire(), null);
    assert.equal((await sem.info()).used, 3);
    const waiting = sem.acquire({ permits: 2, timeout: 5000 });
    await sleep(100);
    await one.release();
    await sleep(100);
    assert.equal((await sem.info()).waiters, 1, "one free permit is not enough for two");
    await two.release();
    const next = await waiting;
    assert.equal(next.permits, 2);
    assert.ok(next.token > two.token);
    assert.equal(await next.release(), true);
    assert.equal(await next.release(), false, "a second release is harmless");
    await assert.rejects(sem.acquire({ permits: 4 }), RangeError);
  });

  test("a timeout throws NotAcquired", async () => {
    const sem = new Semaphore(redis, "s:full", { limit: 1, ttl: 3000 });
    const p = await sem.acquire();
    await assert.rejects(sem.acquire({ timeout: 200 }), NotAcquired);
    await p.release();
  });
});

describe("LeaderElector", () => {
  test("one leader at a time; resigning elects the waiting candidate at once with a higher term", async () => {
    const a = await new LeaderElector(redis, "e:jobs", { ttl: 3000 }).campaign({ timeout: 1000 });
    assert.equal(typeof a.term, "bigint");
    const b = new LeaderElector(redis, "e:jobs", { ttl: 3000 });
    assert.equal(await b.tryLead(), null);
    assert.equal((await b.current()).term, a.term);
    const waiting = b.campaign({ timeout: 5000 });
    await sleep(100);
    const t0 = performance.now();
    await a.resign();
    const lead = await waiting;
    assert.ok(performance.now() - t0 < 1000);
    assert.ok(lead.term > a.term);
    assert.equal(a.signal.aborted, false, "a resignation is not a loss");
    await lead.resign();
    assert.equal(await b.current(), null);
  });

  test("a leader whose process stops renewing is replaced after its ttl", async () => {
    const a = await new LeaderElector(redis, "e:lapse", { ttl: 500 }).campaign();
    a.abandon();
    const t0 = performance.now();
    const b = await new LeaderElector(redis, "e:lapse", { ttl: 500 }).campaign({ timeout: 3000 });
    const took = performance.now() - t0;
    assert.ok(took > 300 && took < 1500, `elected after ${took} ms`);
    await b.resign();
  });
});

describe("LeaderObserver", () => {
  test("follows elections, resignations and lapses without polling", async () => {
    const el = new LeaderElector(redis, "e:observed", { ttl: 400 });
    const obs = await el.observe();
    try {
      assert.equal(obs.current, null);
      const a = await el.campaign();
      const seen = await obs.nextChange(3000);
      assert.equal(seen.term, a.term);
      assert.equal(seen.candidate, a.owner);
      await a.resign();
      assert.equal(await obs.nextChange(3000), null);
      const b = await el.campaign();
      assert.equal((await obs.nextChange(3000)).term, b.term);
      b.abandon(); // its lease lapses: the server's timer announces it
      const t0 = performance.now();
      assert.equal(await obs.nextChange(3000), null);
      assert.ok(performance.now() - t0 < 2000);
      await assert.rejects(obs.nextChange(200), (e) => e.name === "TimeoutError");
    } finally {
      await obs.close();
    }
    assert.match(String(await redis.config("GET", "notify-keyspace-events")), /K/);
  });
});
