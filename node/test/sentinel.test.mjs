// Through a Sentinel-configured ioredis Redis: locks and elections, and a forced failover
// while a guard is held and a writer waits (the client follows the new master).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import Redis from "ioredis";

import { LeaderElector, RwLock } from "../dist/index.js";
import { raw, Sentinel, Server, sleep, until } from "./servers.mjs";

let master;
let replica;
let sentinel;
before(async () => {
  master = await Server.start();
  replica = await Server.start({ args: ["--replicaof", "127.0.0.1", String(master.port)] });
  await until(20_000, "the replica to sync", async () => String(await replica.raw("INFO", "replication")).includes("master_link_status:up"));
  sentinel = await Sentinel.start(master.port);
  await until(20_000, "the sentinel to find the replica", async () => (await sentinel.replicasKnown()) === 1);
});
after(async () => {
  await sentinel?.stop();
  await replica?.stop();
  await master?.stop();
});

const FAST = { baseDelay: 20, maxDelay: 300, budget: 20_000 };
const viaSentinel = () => {
  const r = new Redis({ sentinels: [{ host: "127.0.0.1", port: sentinel.port }], name: "mymaster" });
  r.on("error", () => undefined);
  return r;
};

describe("sentinel", () => {
  test("locks and elections work through a sentinel master", async () => {
    const r = viaSentinel();
    try {
      const lock = new RwLock(r, "sn:lock", { ttl: 2000, retry: FAST });
      const g = await lock.write({ timeout: 5000 });
      assert.equal(await lock.tryRead(), null);
      assert.equal((await lock.info()).holders[0].token, g.token);
      await g.release();
      const lead = await new LeaderElector(r, "sn:leader", { ttl: 2000, retry: FAST }).campaign({ timeout: 5000 });
      assert.ok(lead.held && lead.term > 0n);
      await lead.resign();
    } finally {
      r.disconnect();
    }
  });

  test("a failover while held and while a writer waits: the hold survives, the waiter is served by the new master", async () => {
    const r = viaSentinel();
    try {
      const lock = new RwLock(r, "sn:failover", { ttl: 3000, retry: FAST, commandTimeout: 1000 });
      const g = await lock.write();
      const waiting = lock.write({ timeout: 30_000 });
      await sleep(300);
      assert.equal(await master.raw("WAIT", 1, 5000), 1, "the replica has every write");
      await raw(sentinel.port, "SENTINEL", "FAILOVER", "mymaster");
      await until(30_000, "the sentinel to promote the replica", async () => (await sentinel.masterPort()) === replica.port, 100);
      await sleep(4000); // past one ttl: held only if renewals found the new master
      assert.equal(g.held, true, String(g.lost));
      assert.ok(String(await replica.raw("INFO", "replication")).includes("role:master"));
      // Never two holders: the new master counts this hold (not lapsed, not handed on).
      const info = JSON.stringify(await replica.raw("RWLOCK.INFO", "sn:failover"));
      assert.ok(info.includes(g.owner), `the new master holds ${info}`);
      assert.equal(await g.release(), true);
      const next = await waiting;
      assert.ok(next.token > g.token, "the waiter is served by the new master");
      assert.equal(await next.release(), true);
    } finally {
      r.disconnect();
    }
  });
});
