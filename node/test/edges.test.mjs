// The client at its edges (issue 21's behaviours): a refused connection fails fast naming the
// address and the cause; a server without the module says how to load it; a ttl above the
// server's lease.max-ttl is refused with its unit; a lost reply is adopted through INFO (a
// proxy that swallows the reply); grants acknowledged by replicas (replicas: n).
import assert from "node:assert/strict";
import net from "node:net";
import { after, before, describe, test } from "node:test";
import Redis from "ioredis";

import {
  ConnectionFailed,
  LeaderElector,
  LimitMismatch,
  ModuleNotLoaded,
  NotReplicated,
  PermitsMismatch,
  RwLock,
  Semaphore,
  TtlRefused,
} from "../dist/index.js";
import { freePort, Server, until } from "./servers.mjs";

let server;
let redis;
before(async () => {
  server = await Server.start({ moduleArgs: ["max-ttl", "60000"] });
  redis = new Redis({ port: server.port, host: "127.0.0.1" });
});
after(async () => {
  redis.disconnect();
  await server.stop();
});

/** A TCP proxy to `port` that, while `swallow` is set, forwards a request containing that
 * text to the server and then cuts the client's connection without its reply. */
async function proxy(port) {
  const p = { swallow: null, cut: 0 };
  p.server = net.createServer((client) => {
    const up = net.connect(port, "127.0.0.1");
    let dropping = false;
    client.on("data", (d) => {
      if (p.swallow !== null && d.includes(p.swallow)) {
        p.swallow = null;
        dropping = true;
        up.write(d);
        // Long enough for the server to run it; then the client loses the connection.
        setTimeout(() => {
          p.cut += 1;
          client.destroy();
          up.destroy();
        }, 100);
        return;
      }
      up.write(d);
    });
    up.on("data", (d) => {
      if (!dropping) client.write(d);
    });
    client.on("error", () => up.destroy());
    up.on("error", () => client.destroy());
    client.on("close", () => up.destroy());
    up.on("close", () => client.destroy());
  });
  p.port = await freePort();
  await new Promise((r) => p.server.listen(p.port, "127.0.0.1", r));
  return p;
}

describe("edges", () => {
  test("a refused connection fails a try within 2 s, naming the address and the cause", async () => {
    const port = await freePort();
    const dead = new Redis({ port, host: "127.0.0.1", lazyConnect: true });
    const t0 = performance.now();
    const err = await new RwLock(dead, "e:refused").tryWrite().then(
      () => null,
      (e) => e,
    );
    const took = performance.now() - t0;
    assert.ok(err instanceof ConnectionFailed, String(err));
    assert.equal(err.code, "ECONNREFUSED");
    assert.match(err.message, new RegExp(`127\\.0\\.0\\.1:${port}`));
    assert.match(err.message, /Connection refused/);
    assert.ok(took < 2000, `failed after ${took} ms`);
    dead.disconnect();
  });

  test("a wrong password fails at once with the server's refusal, not after retries", async () => {
    const locked = await Server.start({ args: ["--requirepass", "right"] });
    const r = new Redis({ port: locked.port, host: "127.0.0.1", password: "wrong", lazyConnect: true });
    r.on("error", () => undefined);
    try {
      const t0 = performance.now();
      const err = await new RwLock(r, "e:auth").tryWrite().catch((e) => e);
      assert.match(String(err), /WRONGPASS|invalid password/i);
      assert.ok(performance.now() - t0 < 1000);
    } finally {
      r.disconnect();
      await locked.stop();
    }
  });

  test("a server without the module: ModuleNotLoaded says how to load it", async () => {
    const bare = await Server.start({ module: false });
    const r = new Redis({ port: bare.port, host: "127.0.0.1" });
    try {
      const err = await new RwLock(r, "e:nomodule").tryWrite().catch((e) => e);
      assert.ok(err instanceof ModuleNotLoaded, String(err));
      assert.match(err.message, /not loaded on 127\.0\.0\.1:\d+/);
      assert.match(err.message, /--loadmodule/);
      assert.match(err.message, /MODULE LOAD/);
    } finally {
      r.disconnect();
      await bare.stop();
    }
  });

  test("a ttl above lease.max-ttl is refused, in ms; a ttl of a few ms is refused before sending", async () => {
    const err = await new RwLock(redis, "e:ttl", { ttl: 120_000 }).tryWrite().catch((e) => e);
    assert.ok(err instanceof TtlRefused, String(err));
    assert.equal(err.ttl, 120000);
    assert.equal(err.maxTtl, 60000);
    assert.match(err.message, /120000 ms/);
    assert.match(err.message, /60000 ms/);
    assert.throws(() => new RwLock(redis, "e:ttl", { ttl: 5 }), /milliseconds.*did you mean 5000/);
  });

  test("semaphore refusals are typed: LimitMismatch, PermitsMismatch", async () => {
    const a = await new Semaphore(redis, "e:sem", { limit: 3, ttl: 3000, owner: "o1" }).acquire({ permits: 1 });
    const err = await new Semaphore(redis, "e:sem", { limit: 4, ttl: 3000 }).tryAcquire().catch((e) => e);
    assert.ok(err instanceof LimitMismatch, String(err));
    assert.equal(err.limit, 3);
    const err2 = await new Semaphore(redis, "e:sem", { limit: 3, ttl: 3000, owner: "o1" }).tryAcquire({ permits: 2 }).catch((e) => e);
    assert.ok(err2 instanceof PermitsMismatch, String(err2));
    assert.equal(err2.held, 1);
    await a.release();
  });

  test("a grant whose reply was lost is adopted through RWLOCK.INFO (one hold, its token)", async () => {
    const p = await proxy(server.port);
    const r = new Redis({ port: p.port, host: "127.0.0.1" });
    try {
      const lock = new RwLock(r, "e:lost", { ttl: 3000, commandTimeout: 1000 });
      p.swallow = "RWLOCK.WLOCK";
      const g = await lock.write({ timeout: 5000 });
      assert.equal(p.cut, 1, "the reply was swallowed");
      const info = await new RwLock(redis, "e:lost").info();
      assert.equal(info.holders.length, 1);
      assert.equal(info.holders[0].count, 1, "no second hold");
      assert.equal(info.holders[0].token, g.token);
      assert.equal(await g.release(), true);
      assert.equal((await new RwLock(redis, "e:lost").info()).mode, null);
    } finally {
      r.disconnect();
      p.server.close();
    }
  });

  test("a lost reply of an election is adopted through LEADER.CURRENT", async () => {
    const p = await proxy(server.port);
    const r = new Redis({ port: p.port, host: "127.0.0.1" });
    try {
      p.swallow = "LEADER.CAMPAIGN";
      const lead = await new LeaderElector(r, "e:lostlead", { ttl: 3000, commandTimeout: 1000 }).campaign({ timeout: 5000 });
      assert.equal(p.cut, 1);
      const cur = await new LeaderElector(redis, "e:lostlead").current();
      assert.equal(cur.term, lead.term);
      await lead.resign();
      assert.equal(await new LeaderElector(redis, "e:lostlead").current(), null);
    } finally {
      r.disconnect();
      p.server.close();
    }
  });

  test("replicas: a grant counts only once acknowledged; too few replicas give it back", async () => {
    const replica = await Server.start({ args: ["--replicaof", "127.0.0.1", String(server.port)] });
    try {
      await until(20_000, "the replica to sync", async () => String(await replica.raw("INFO", "replication")).includes("master_link_status:up"));
      const one = new RwLock(redis, "e:acks", { ttl: 3000, replicas: 1, replicaTimeout: 1000 });
      const g = await one.write({ timeout: 2000 });
      await new Promise((r) => setTimeout(r, 1200)); // renewals with acks too
      assert.equal(g.held, true);
      await g.release();
      const two = new RwLock(redis, "e:acks", { ttl: 3000, replicas: 2, replicaTimeout: 200 });
      const err = await two.write({ timeout: 2000 }).catch((e) => e);
      assert.ok(err instanceof NotReplicated, String(err));
      assert.equal(err.acked, 1);
      assert.equal((await one.info()).mode, null, "given back");
    } finally {
      await replica.stop();
    }
  });
});
