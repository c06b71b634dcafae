// A server restart while a lease is held: from the AOF the hold survives and the watchdog
// carries on; empty, the holder learns of the loss (revoked) and the client keeps working.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import Redis from "ioredis";

import { LeaseLost, RwLock } from "../dist/index.js";
import { Server, sleep, until } from "./servers.mjs";

const FAST = { baseDelay: 20, maxDelay: 200, budget: 15_000 };

describe("restart", () => {
  test("from the AOF: the hold survives the restart and stays held", async () => {
    const s = await Server.start({ args: ["--appendonly", "yes", "--appendfsync", "always"] });
    const r = new Redis({ port: s.port, host: "127.0.0.1" });
    r.on("error", () => undefined);
    try {
      const lock = new RwLock(r, "r:aof", { ttl: 3000, commandTimeout: 500, retry: FAST });
      const g = await lock.write();
      await s.restart();
      await sleep(3500); // past one ttl: held only if renewals reached the restarted server
      assert.equal(g.held, true, String(g.lost));
      const other = await new RwLock(r, "r:aof", { ttl: 3000, retry: FAST }).tryWrite();
      assert.equal(other, null, "nobody else got it");
      assert.equal(await g.release(), true);
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  test("empty: the holder learns of the loss, and a new grant has a higher token", async () => {
    const s = await Server.start();
    const r = new Redis({ port: s.port, host: "127.0.0.1" });
    r.on("error", () => undefined);
    try {
      const lock = new RwLock(r, "r:empty", { ttl: 1500, commandTimeout: 500, retry: FAST });
      const g = await lock.write();
      await s.restart();
      await until(6000, "the loss", () => g.signal.aborted);
      assert.ok(g.signal.reason instanceof LeaseLost);
      assert.ok(["revoked", "expired"].includes(g.signal.reason.reason));
      const next = await lock.write({ timeout: 3000 });
      assert.ok(next.token > g.token, "tokens never go back");
      await next.release();
    } finally {
      r.disconnect();
      await s.stop();
    }
  });

  test("a waiter with a timeout rides out a restart (retries inside its timeout)", async () => {
    const s = await Server.start();
    const r = new Redis({ port: s.port, host: "127.0.0.1" });
    r.on("error", () => undefined);
    try {
      const lock = new RwLock(r, "r:wait", { ttl: 1500, commandTimeout: 500, retry: FAST });
      const g = await lock.write();
      const waiting = lock.write({ timeout: 8000 });
      await sleep(200);
      await s.restart();
      const next = await waiting;
      assert.ok(next.token > g.token);
      await next.release();
      g.abandon();
    } finally {
      r.disconnect();
      await s.stop();
    }
  });
});
