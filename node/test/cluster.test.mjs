// Through an ioredis Cluster: requests routed by the key's slot, LEASE.EXEC with a hash tag,
// and a failover of a key's master while its lock is held (MOVED followed by the renewals).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import Redis from "ioredis";

import { RwLock, Semaphore } from "../dist/index.js";
import { Cluster, raw, sleep } from "./servers.mjs";

let cluster;
let client;
before(async () => {
  cluster = await Cluster.start();
  client = new Redis.Cluster(cluster.nodes.slice(0, 3).map((n) => ({ host: "127.0.0.1", port: n.port })));
  client.on("error", () => undefined);
});
after(async () => {
  client.disconnect();
  await cluster.stop();
});

const FAST = { baseDelay: 20, maxDelay: 300, budget: 20_000 };

describe("cluster", () => {
  test("locks on keys of every master, each on its own node; exec fenced with a hash tag", async () => {
    const keys = ["a", "b", "c", "d", "e", "f", "g", "h"].map((k) => `{c:${k}}`);
    const owners = new Set();
    for (const k of keys) owners.add((await cluster.ownerOf(k)).port);
    assert.ok(owners.size >= 2, "the keys span masters");
    const guards = await Promise.all(keys.map((k) => new RwLock(client, k, { ttl: 3000 }).write({ timeout: 2000 })));
    for (const [i, k] of keys.entries()) {
      const port = (await cluster.ownerOf(k)).port;
      const node = cluster.nodes.find((n) => n.port === port);
      const info = await node.raw("RWLOCK.INFO", k);
      assert.ok(JSON.stringify(info).includes(guards[i].owner), `the hold of ${k} is on its master`);
      assert.equal(await guards[i].exec("SET", `${k}:data`, "v"), "OK");
    }
    await Promise.all(guards.map((g) => g.release()));
    const sem = new Semaphore(client, "{c:sem}", { limit: 2, ttl: 3000 });
    const p = await sem.acquire({ permits: 2 });
    assert.equal(await sem.tryAcquire(), null);
    await p.release();
  });

  test("a failover of the key's master while held: the renewals follow MOVED, the hold survives", async () => {
    const key = "{c:failover}";
    const lock = new RwLock(client, key, { ttl: 3000, retry: FAST, commandTimeout: 1000 });
    const g = await lock.write();
    const replica = await cluster.failOver(key);
    await sleep(3500); // past one ttl: held only if a renewal reached the new master
    assert.equal(g.held, true, String(g.lost));
    assert.ok(JSON.stringify(await cluster.nodes.find((n) => n.port === replica.port).raw("RWLOCK.INFO", key)).includes(g.owner));
    const other = await new RwLock(client, key, { ttl: 3000, retry: FAST }).write({ timeout: 200 }).catch((e) => e);
    assert.equal(other.name, "NotAcquired");
    assert.equal(await g.release(), true);
  });

  test("a slot migration while held: renewals follow ASK, then MOVED; the hold moves with its key", async () => {
    const key = "{c:migrate}";
    const lock = new RwLock(client, key, { ttl: 1500, retry: FAST, commandTimeout: 1000 });
    const g = await lock.write();
    const source = await cluster.ownerOf(key);
    const nodes = String(await raw(source.port, "CLUSTER", "NODES")).trim().split("\n").map((l) => l.split(" "));
    const target = nodes.find((f) => f[2].includes("master") && f[0] !== source.id);
    const targetPort = Number(target[1].split(":")[1].split("@")[0]);
    const slot = await raw(source.port, "CLUSTER", "KEYSLOT", key);
    assert.equal(await raw(targetPort, "CLUSTER", "SETSLOT", slot, "IMPORTING", source.id), "OK");
    assert.equal(await raw(source.port, "CLUSTER", "SETSLOT", slot, "MIGRATING", target[0]), "OK");
    assert.equal(await raw(source.port, "MIGRATE", "127.0.0.1", targetPort, key, 0, 5000), "OK");
    // The source now answers ASK for the key: past one ttl, held only if renewals followed it.
    await sleep(1700);
    assert.equal(g.held, true, String(g.lost));
    for (const port of [targetPort, source.port]) await raw(port, "CLUSTER", "SETSLOT", slot, "NODE", target[0]);
    for (const n of cluster.nodes) await raw(n.port, "CLUSTER", "SETSLOT", slot, "NODE", target[0]).catch(() => undefined);
    await sleep(1700); // and now MOVED
    assert.equal(g.held, true, String(g.lost));
    assert.ok(JSON.stringify(await raw(targetPort, "RWLOCK.INFO", key)).includes(g.owner));
    assert.equal(await g.release(), true);
  });
});
