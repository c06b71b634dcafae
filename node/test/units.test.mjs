// The protocol core without I/O, driven by hand with a fake clock: adoption of a lost reply,
// retries inside the deadline, a refused connection ending a try fast, typed server errors,
// replica acknowledgements, the watchdog's bound; and reply parsing.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Acquisition, Acked, Failed, lockKind, semaphoreKind, watchdog, release } from "../dist/protocol.js";
import { Backoff, classify, DEFAULT_RETRY } from "../dist/retry.js";
import { LeaseTiming } from "../dist/timing.js";
import { ConnectionFailed, Deadlock, Fenced, LimitMismatch, LockGone, ModuleNotLoaded, NotReplicated, PermitsMismatch, TtlRefused } from "../dist/errors.js";
import { lockInfo, token } from "../dist/replies.js";

function replyError(text) {
  const e = new Error(text);
  e.name = "ReplyError";
  return e;
}

/** Drives `machine` with `answer(op, now)`; sleeps move the fake clock. Answers [result, ops]. */
function drive(machine, clock, answer) {
  const ops = [];
  let r = machine.next();
  while (!r.done) {
    const op = r.value;
    ops.push(op);
    if (op.op === "sleep") {
      clock.t += op.ms;
      r = machine.next(null);
    } else {
      r = machine.next(answer(op, clock.t));
    }
  }
  return [r.value, ops];
}

const refused = (addr = "127.0.0.1:1") => new Failed(new ConnectionFailed(addr, "cannot connect: Connection refused", "ECONNREFUSED", false), false, addr);
const lost = () => new Failed(new ConnectionFailed("a:1", "connection lost before the reply", "ECONNRESET", true), true, "a:1");
const info = (owner, tok) => ["mode", "write", "holders", [["count", "1", "mode", "write", "owner", owner, "token", String(tok), "ttl", "9000"]], "token", String(tok), "waiters", "0"];

describe("Acquisition", () => {
  const timing = new LeaseTiming(10_000);
  const policy = { ...DEFAULT_RETRY, baseDelay: 10, maxDelay: 100 };

  test("a lost reply is adopted through INFO, not asked again", () => {
    const clock = { t: 0 };
    const kind = lockKind("k", "me", "write", 10_000, true);
    const acq = new Acquisition(kind, timing, policy, 2000, 5000, policy, () => clock.t);
    let wlocks = 0;
    const [grant, ops] = drive(acq.run(), clock, (op) => {
      if (op.args[0] === "RWLOCK.WLOCK") return ++wlocks === 1 ? lost() : "99";
      if (op.args[0] === "RWLOCK.INFO") return info("me", 42);
      throw new Error(op.args.join(" "));
    });
    assert.equal(wlocks, 1, "never asked twice");
    assert.equal(grant.token, 42n);
    assert.ok(ops.some((o) => o.args?.[0] === "RWLOCK.INFO"));
  });

  test("a waiting request carries WAIT with the time left, on a dedicated connection", () => {
    const clock = { t: 0 };
    const acq = new Acquisition(lockKind("k", "me", "write", 10_000, true), timing, policy, 2000, 5000, policy, () => clock.t);
    const [, ops] = drive(acq.run(), clock, () => "7");
    assert.deepEqual(ops[0].args.slice(-2), ["WAIT", 5000]);
    assert.equal(ops[0].dedicated, true);
    assert.equal(ops[0].limit, 7000);
  });

  test("a refused connection ends a try within refusedBudget with the ConnectionFailed", () => {
    const clock = { t: 0 };
    const acq = new Acquisition(lockKind("k", "me", "write", 10_000, true), timing, policy, 2000, 0, policy, () => clock.t);
    assert.throws(() => drive(acq.run(), clock, () => refused("127.0.0.1:6399")), (e) => {
      assert.ok(e instanceof ConnectionFailed);
      assert.match(e.message, /127\.0\.0\.1:6399.*Connection refused/);
      return true;
    });
    assert.ok(clock.t <= DEFAULT_RETRY.refusedBudget, `gave up at ${clock.t} ms`);
  });

  test("a wait rides out refusals inside its timeout, and then the server's grant counts", () => {
    const clock = { t: 0 };
    const acq = new Acquisition(lockKind("k", "me", "write", 10_000, true), timing, policy, 2000, 5000, policy, () => clock.t);
    const [grant] = drive(acq.run(), clock, (_op, t) => (t < 3000 ? refused() : "5"));
    assert.equal(grant.token, 5n);
    assert.ok(clock.t >= 3000 && clock.t < 5000);
  });

  test("grants with too few replica acks are given back: NotReplicated", () => {
    const clock = { t: 0 };
    const kind = lockKind("k", "me", "write", 10_000, true, { replicas: 2, timeout: 100 });
    const acq = new Acquisition(kind, timing, policy, 2000, 5000, policy, () => clock.t);
    const sent = [];
    assert.throws(
      () =>
        drive(acq.run(), clock, (op) => {
          sent.push(op.args[0]);
          if (op.args[0] === "RWLOCK.WLOCK") {
            assert.deepEqual(op.follow?.[0], "RWLOCK.RENEW");
            return new Acked("8", 1);
          }
          return "1";
        }),
      (e) => e instanceof NotReplicated && e.acked === 1 && e.wanted === 2,
    );
    assert.deepEqual(sent, ["RWLOCK.WLOCK", "RWLOCK.UNLOCK"]);
  });
});

describe("watchdog", () => {
  test("renews every third of the ttl; a nil renewal is a revocation", () => {
    const clock = { t: 0 };
    const timing = new LeaseTiming(3000);
    const published = [];
    let renewals = 0;
    const dog = watchdog(lockKind("k", "me", "write", 3000, true), timing, DEFAULT_RETRY, 2000, 0, (b, r) => published.push([b, r]), () => clock.t);
    const [reason, ops] = drive(dog, clock, () => (++renewals < 3 ? "1" : null));
    assert.equal(reason, "revoked");
    assert.deepEqual(ops.filter((o) => o.op === "sleep").map((o) => o.ms), [1000, 1000, 1000]);
    assert.equal(published.at(-1)[1], "revoked");
    assert.equal(published[0][0], 1000 + 3000 - timing.margin);
  });

  test("without any reply it gives up at send time + ttl - margin (expired), never later", () => {
    const clock = { t: 0 };
    const timing = new LeaseTiming(3000);
    const dog = watchdog(lockKind("k", "me", "write", 3000, true), timing, DEFAULT_RETRY, 2000, 0, () => undefined, () => clock.t);
    const [reason] = drive(dog, clock, () => lost());
    assert.equal(reason, "expired");
    assert.ok(clock.t <= 3000 - timing.margin + 1e-9, `at ${clock.t}`);
  });
});

describe("classify and replies", () => {
  test("transient codes are retried; the module's codes become typed errors", () => {
    for (const code of ["LOADING x", "TRYAGAIN", "CLUSTERDOWN x", "MASTERDOWN x", "READONLY x"]) {
      assert.equal(classify(replyError(code), true).transient, true, code);
    }
    const t = (text) => classify(replyError(text), true, "h:1").error;
    assert.ok(t("DEADLOCK upgrade") instanceof Deadlock);
    assert.ok(t("LOCKGONE key") instanceof LockGone);
    assert.ok(t("FENCED token 3") instanceof Fenced);
    assert.ok(t("LIMIT this semaphore's limit is 3") instanceof LimitMismatch);
    assert.ok(t("ERR this semaphore's limit is 3; a request must name the same limit") instanceof LimitMismatch);
    assert.equal(t("ERR this semaphore's limit is 3; a request must name the same limit").limit, 3);
    assert.ok(t("PERMITS this owner holds 2 permits of this semaphore") instanceof PermitsMismatch);
    assert.ok(t("ERR this owner holds 2 permits of this semaphore; release them before asking for others") instanceof PermitsMismatch);
    assert.ok(t("ERR unknown command 'RWLOCK.WLOCK', with args beginning with: ") instanceof ModuleNotLoaded);
    const ttl = t("ERR ttl must be an integer from 1 to 60000 ms (lease.max-ttl, and lease.quarantine while it is set), got '90000'");
    assert.ok(ttl instanceof TtlRefused && ttl.ttl === 90000 && ttl.maxTtl === 60000);
    assert.equal(classify(replyError("WRONGTYPE x"), true).transient, false);
  });

  test("full jitter stays below the exponential ceiling and inside the deadline", () => {
    const clock = { t: 0 };
    const b = new Backoff({ ...DEFAULT_RETRY, baseDelay: 10, maxDelay: 80 }, () => clock.t, () => 0.999);
    const ds = [b.nextDelay(1000), b.nextDelay(1000), b.nextDelay(1000), b.nextDelay(1000), b.nextDelay(1000)];
    assert.deepEqual(ds.map((d) => Math.round(d)), [10, 20, 40, 80, 80]);
    clock.t = 995;
    assert.ok(b.nextDelay(1000) <= 5);
    clock.t = 1000;
    assert.equal(b.nextDelay(1000), null);
  });

  test("tokens keep every digit; INFO parses", () => {
    assert.equal(token("9223372036854775807"), 9223372036854775807n);
    assert.throws(() => token(null));
    assert.throws(() => token("0"));
    const i = lockInfo(info("o", "12345678901234567"));
    assert.equal(i.mode, "write");
    assert.equal(i.holders[0].token, 12345678901234567n);
  });

  test("a semaphore hold of other permits is not adopted; release sweeps until 0", () => {
    const k = semaphoreKind("s", "me", 3, 2, 1000, true);
    const sinfo = ["holders", [["owner", "me", "permits", "1", "token", "9", "ttl", "100"]], "limit", "3", "used", "1", "token", "9", "waiters", "0"];
    assert.deepEqual(k.hold(sinfo), [0, 0n]);
    const clock = { t: 0 };
    let n = 3;
    const [released] = drive(release(lockKind("k", "me", "write", 1000, true), true, DEFAULT_RETRY, 1000, () => clock.t), clock, () => (n-- > 0 ? 1 : 0));
    assert.equal(released, 3);
  });

  test("the ttl is in ms: too short refused with a hint", () => {
    assert.throws(() => new LeaseTiming(5), /did you mean 5000/);
    assert.equal(new LeaseTiming(3000).renewEvery, 1000);
    assert.equal(new LeaseTiming(3000).margin, 32);
  });
});
