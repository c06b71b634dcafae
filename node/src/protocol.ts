/**
 * The client's behaviour as plain generators, free of I/O ("sans-I/O"), as the Python
 * client's `redis_lease.protocol`. Each generator yields operations, a {@link Call} (one
 * request) or a {@link Sleep}, and is sent back the reply of each call (or a {@link Failed}).
 * The connector (connector.ts) drives them. They hold acquisition with `WAIT`, adoption of a
 * grant whose reply was lost (through `RWLOCK.INFO`, `SEMAPHORE.INFO` or `LEADER.CURRENT`),
 * confirmation of a late grant, replica acknowledgements, retries with backoff, the
 * watchdog's renewal loop and release.
 */

import { LeaseLost, NotReplicated, ProtocolError, type LossReason } from "./errors.js";
import * as replies from "./replies.js";
import { Backoff, classify, monotonic, type Clock, type RetryPolicy } from "./retry.js";
import { waitMs, type LeaseTiming } from "./timing.js";

export type Arg = string | number | Buffer;
export type Key = string | Buffer;

/** `WAIT numreplicas timeout` after a grant or renewal: `replicas` must acknowledge it. */
export interface Acks {
  replicas: number;
  timeout: number;
}

/** One request. `limit`: ms to wait for the reply (null: no limit). `dedicated`: it waits in
 * the server (or for replicas), so it gets a connection of its own. `route`: the key that
 * chooses the cluster node. `acks`: followed on the same connection by `follow` (if any) and
 * `WAIT replicas timeout`; the reply is then an {@link Acked}. */
export interface Call {
  op: "call";
  args: Arg[];
  limit: number | null;
  dedicated: boolean;
  route: Key;
  acks?: Acks | undefined;
  follow?: Arg[] | undefined;
}

export interface Sleep {
  op: "sleep";
  ms: number;
}

/** What the driver sends back for a call that failed. `sent`: whether the request may have
 * reached the server (false when connecting failed). */
export class Failed {
  constructor(
    readonly error: unknown,
    readonly sent: boolean,
    readonly address: string,
  ) {}
}

/** The reply of a call with `acks`: the first command's reply and how many replicas acked. */
export class Acked {
  constructor(
    readonly value: unknown,
    readonly acked: number,
  ) {}
}

export type Op = Call | Sleep;
export type Machine<T> = Generator<Op, T, unknown>;

export function call(args: Arg[], route: Key, limit: number | null, dedicated = false): Call {
  return { op: "call", args, limit, dedicated, route };
}

function sleep(ms: number): Sleep {
  return { op: "sleep", ms };
}

/** What distinguishes a lock, a semaphore and an election for the shared machinery. */
export interface Kind {
  key: Key;
  owner: string;
  /** The grant request, without WAIT. */
  request: Arg[];
  /** The state read that adoption checks. */
  info: Arg[];
  renew: Arg[];
  release: Arg[];
  /** info reply -> [holds of ours, token]. */
  hold: (v: unknown) => [number, bigint];
  /** Each grant adds a hold (RWLOCK reentrancy). */
  reentrant: boolean;
  /** The owner id is ours alone (a fresh UUIDv4). */
  generated: boolean;
  /** Replica acknowledgements asked for every grant and renewal. */
  acks: Acks | undefined;
}

export function lockKind(key: Key, owner: string, mode: "read" | "write", ttl: number, generated: boolean, acks?: Acks): Kind {
  return {
    key,
    owner,
    request: [mode === "write" ? "RWLOCK.WLOCK" : "RWLOCK.RLOCK", key, owner, ttl],
    info: ["RWLOCK.INFO", key],
    renew: ["RWLOCK.RENEW", key, owner, ttl],
    release: ["RWLOCK.UNLOCK", key, owner],
    hold: (v) => {
      const h = replies.lockInfo(v).holders.find((x) => x.owner === owner && x.mode === mode);
      return h ? [h.count, h.token] : [0, 0n];
    },
    reentrant: true,
    generated,
    acks,
  };
}

export function semaphoreKind(
  key: Key,
  owner: string,
  limit: number,
  permits: number,
  ttl: number,
  generated: boolean,
  acks?: Acks,
): Kind {
  return {
    key,
    owner,
    request: ["SEMAPHORE.ACQUIRE", key, owner, limit, ttl, "PERMITS", permits],
    info: ["SEMAPHORE.INFO", key],
    renew: ["SEMAPHORE.RENEW", key, owner, ttl],
    release: ["SEMAPHORE.RELEASE", key, owner],
    // A hold of other permits is not what was asked for: asking again gets the refusal.
    hold: (v) => {
      const h = replies.semaphoreInfo(v).holders.find((x) => x.owner === owner);
      return h && h.permits === permits ? [1, h.token] : [0, 0n];
    },
    reentrant: false,
    generated,
    acks,
  };
}

export function leaderKind(key: Key, candidate: string, ttl: number, generated: boolean, acks?: Acks): Kind {
  return {
    key,
    owner: candidate,
    request: ["LEADER.CAMPAIGN", key, candidate, ttl],
    info: ["LEADER.CURRENT", key],
    renew: ["LEADER.RENEW", key, candidate, ttl],
    release: ["LEADER.RESIGN", key, candidate],
    hold: (v) => {
      const cur = replies.leaderInfo(v);
      return cur !== null && cur.candidate === candidate ? [1, cur.term] : [0, 0n];
    },
    reentrant: false,
    generated,
    acks,
  };
}

/** A confirmed grant. `sent`: when the request that last proved the lease was sent (the
 * watchdog's starting point). `sweep`: release until the server answers 0 (a surplus hold may
 * exist after an unknown outcome). */
export interface Grant {
  token: bigint;
  sent: number;
  sweep: boolean;
}

/** A short request, retried on transient failures until `deadline` (or the budget). */
export function* queryRetry(c: Call, deadline: number | null, policy: RetryPolicy, now: Clock = monotonic): Machine<unknown> {
  const backoff = new Backoff(policy, now);
  for (;;) {
    const r = yield c;
    if (!(r instanceof Failed)) return r;
    const f = classify(r.error, r.sent, r.address);
    if (!f.transient) throw f.error;
    const d = backoff.nextDelay(deadline, f);
    if (d === null) throw backoff.giveUp(f.error);
    yield sleep(d);
  }
}

function renewCall(kind: Kind, limit: number): Call {
  const c = call(kind.renew, kind.key, limit, kind.acks !== undefined);
  if (kind.acks !== undefined) {
    c.acks = kind.acks;
    c.limit = limit + kind.acks.timeout;
  }
  return c;
}

/** Renews until success (answers the send time of the renewing request), a definitive answer,
 * or `validUntil` (answers the reason of the loss). */
export function* renewOnce(
  kind: Kind,
  validUntil: number,
  policy: RetryPolicy,
  commandTimeout: number,
  now: Clock = monotonic,
): Machine<number | LossReason> {
  const backoff = new Backoff(policy, now);
  let unreplicated = false;
  for (;;) {
    const t = now();
    if (t >= validUntil) return unreplicated ? "not-replicated" : "expired";
    let r = yield renewCall(kind, Math.min(commandTimeout, validUntil - t));
    if (r instanceof Acked) {
      if (r.value !== null && kind.acks !== undefined && r.acked < kind.acks.replicas) {
        unreplicated = true;
        const d = backoff.nextDelay(validUntil);
        if (d === null) return "not-replicated";
        yield sleep(d);
        continue;
      }
      r = r.value;
    }
    if (r === null) return "revoked";
    if (r instanceof Failed) {
      const f = classify(r.error, r.sent, r.address);
      if (f.transient) {
        const d = backoff.nextDelay(validUntil, f);
        if (d === null) return unreplicated ? "not-replicated" : "expired";
        yield sleep(d);
        continue;
      }
      return f.error instanceof LeaseLost ? "revoked" : "failed";
    }
    return t;
  }
}

/**
 * Keeps a lease alive until it is lost: renews every `renewEvery`, publishes each new validity
 * bound (`publish(bound, null)`) and finally the loss (`publish(null, reason)`). A driver stops
 * it by no longer driving it (on release).
 */
export function* watchdog(
  kind: Kind,
  timing: LeaseTiming,
  policy: RetryPolicy,
  commandTimeout: number,
  lastSent: number,
  publish: (bound: number | null, reason: LossReason | null) => void,
  now: Clock = monotonic,
): Machine<LossReason> {
  let validUntil = timing.validUntil(lastSent);
  for (;;) {
    const renewAt = Math.min(lastSent + timing.renewEvery, validUntil);
    yield sleep(Math.max(0, renewAt - now()));
    const r = yield* renewOnce(kind, validUntil, policy, commandTimeout, now);
    if (typeof r === "string") {
      publish(null, r);
      return r;
    }
    lastSent = r;
    validUntil = timing.validUntil(r);
    publish(validUntil, null);
  }
}

const AGAIN = Symbol("again");

/**
 * One acquisition: a lock hold, a semaphore hold or leadership.
 *
 * `wait`: null waits without a limit (`WAIT 0`); a number <= 0 tries once (no `WAIT`); else the
 * longest wait in ms (`WAIT ms`), which also bounds retries.
 *
 * After a lost reply (the request may have been granted) it does not simply ask again: it reads
 * the state (`kind.info`) and adopts a hold of its owner if there is one, also once more when
 * out of time. `armed` tells the driver, when the machine ends abnormally (an error, an
 * abort), that a hold of ours may exist: it must release it.
 */
export class Acquisition {
  armed = false;
  private uncertainSince: number | null = null;
  private hadUncertain = false;
  private lastError: unknown = undefined;
  private outOfTime = false;

  constructor(
    readonly kind: Kind,
    readonly timing: LeaseTiming,
    readonly policy: RetryPolicy,
    readonly commandTimeout: number,
    readonly wait: number | null,
    readonly releasePolicy: RetryPolicy,
    readonly now: Clock = monotonic,
  ) {}

  get trying(): boolean {
    return this.wait !== null && this.wait <= 0;
  }

  *run(): Machine<Grant | null> {
    const k = this.kind;
    const deadline = this.wait === null || this.trying ? null : this.now() + this.wait;
    let baseline = 0;
    if (k.reentrant && !k.generated) {
      // Holds of a caller-chosen owner that existed before (reentrancy), so that an uncertain
      // failure can tell a grant of ours from an older one.
      const v = yield* queryRetry(call(k.info, k.key, this.commandTimeout), null, this.policy, this.now);
      baseline = k.hold(v)[0];
    }
    // A refused connection ends a try at once (refusedBudget); a wait without a limit rides
    // out a restart for the whole budget.
    const policy = this.wait === null ? { ...this.policy, refusedBudget: this.policy.budget } : this.policy;
    const backoff = new Backoff(policy, this.now);
    for (;;) {
      if (this.uncertainSince !== null) {
        const r = yield call(k.info, k.key, this.commandTimeout);
        if (r instanceof Failed) {
          const f = classify(r.error, r.sent, r.address);
          if (!f.transient) throw f.error;
          const d = this.outOfTime ? null : backoff.nextDelay(deadline, f);
          if (d === null) throw backoff.giveUp(f.error);
          yield sleep(d);
          continue;
        }
        const [count, tok] = k.hold(r);
        if (count > baseline) {
          const out = yield* this.onGrant(tok, this.uncertainSince, deadline, backoff, undefined);
          if (out === AGAIN) continue;
          return out;
        }
        this.uncertainSince = null;
        if (this.outOfTime) {
          // The deadline has passed and nothing was granted after all.
          this.armed = false;
          throw backoff.giveUp(this.lastError);
        }
      }
      const sent = this.now();
      let c: Call;
      let blocking = true;
      if (this.wait === null) {
        c = call([...k.request, "WAIT", 0], k.key, null, true);
      } else if (deadline !== null && deadline > sent + 1) {
        const left = deadline - sent;
        c = call([...k.request, "WAIT", waitMs(left)], k.key, left + this.commandTimeout, true);
      } else {
        c = call(k.request, k.key, this.commandTimeout);
        blocking = false;
      }
      if (k.acks !== undefined) {
        // On a connection of its own so that WAIT counts this connection's writes; a grant by
        // hand-off is followed by the owner's renewal, whose write WAIT then surely counts.
        c.dedicated = true;
        c.acks = k.acks;
        if (blocking) c.follow = k.renew;
        if (c.limit !== null) c.limit += k.acks.timeout;
      }
      this.armed = k.generated;
      let r = yield c;
      let acked: number | undefined;
      if (r instanceof Acked) {
        acked = r.acked;
        r = r.value;
      }
      if (r === null) {
        if (this.wait === null) continue; // WAIT 0 answers nil only where it cannot block
        this.armed = false;
        return null;
      }
      if (!(r instanceof Failed)) {
        const since = this.uncertainSince ?? sent;
        const out = yield* this.onGrant(replies.token(r), since, deadline, backoff, acked);
        if (out === AGAIN) continue;
        return out;
      }
      const f = classify(r.error, r.sent, r.address);
      if (!f.transient) {
        if (this.uncertainSince === null) this.armed = false;
        throw f.error;
      }
      if (f.uncertain) {
        this.hadUncertain = true;
        this.uncertainSince ??= sent;
      } else if (this.uncertainSince === null) {
        this.armed = false;
      }
      const d = backoff.nextDelay(deadline, f);
      if (d !== null) {
        yield sleep(d);
      } else if (this.uncertainSince !== null) {
        // Out of time; but a request whose reply was lost may have been granted: one last look
        // at the state adopts such a hold.
        this.outOfTime = true;
        this.lastError = f.error;
      } else {
        throw backoff.giveUp(f.error);
      }
    }
  }

  /** A grant (by a request sent at `since` or later) becomes a Grant, unless its lease could
   * not be confirmed: lapsed already (ask again while the deadline allows), or unknown (check
   * the state, as after a lost reply), or not acknowledged by enough replicas (given back). */
  private *onGrant(
    tok: bigint,
    since: number,
    deadline: number | null,
    backoff: Backoff,
    acked: number | undefined,
  ): Machine<Grant | null | typeof AGAIN> {
    const k = this.kind;
    const sweep = k.reentrant && k.generated && this.hadUncertain;
    if (k.acks !== undefined && acked !== undefined && acked < k.acks.replicas) {
      yield* release(k, sweep, this.releasePolicy, this.commandTimeout, this.now);
      this.armed = false;
      throw new NotReplicated(acked, k.acks.replicas);
    }
    // A grant adopted from INFO with acks asked for: its replicas are unknown, so renew.
    const confirmed = yield* this.confirm(since, k.acks !== undefined && acked === undefined);
    if (typeof confirmed === "number") {
      this.armed = false;
      return { token: tok, sent: confirmed, sweep };
    }
    if (confirmed === "not-replicated") {
      yield* release(k, sweep, this.releasePolicy, this.commandTimeout, this.now);
      this.armed = false;
      throw new NotReplicated(0, k.acks?.replicas ?? 0);
    }
    if (confirmed === "revoked") {
      this.uncertainSince = null;
      if (this.trying || (deadline !== null && this.now() >= deadline)) {
        this.armed = false;
        return null;
      }
      return AGAIN;
    }
    this.hadUncertain = true;
    this.uncertainSince = since;
    const d = backoff.nextDelay(deadline);
    if (d === null) throw new LeaseLost(confirmed);
    yield sleep(d);
    return AGAIN;
  }

  /** Renews at once if the wait used up much of the lease (the server's answer is
   * authoritative even when the local bound has passed). Answers the send time that proves
   * the lease. */
  private *confirm(sent: number, force: boolean): Machine<number | LossReason> {
    const t = this.timing;
    const now = this.now();
    if (!force && t.validUntil(sent) - now >= (t.ttl * 2) / 3) return sent;
    const until = t.confirmDeadline(sent, now, this.commandTimeout);
    return yield* renewOnce(this.kind, until, this.policy, this.commandTimeout, this.now);
  }
}

/** Releases: one request, or (`sweep`) until the server answers 0, at most 64 times. Answers
 * how many holds were released. */
export function* release(kind: Kind, sweep: boolean, policy: RetryPolicy, commandTimeout: number, now: Clock = monotonic): Machine<number> {
  let released = 0;
  for (let i = 0; i < (sweep ? 64 : 1); i++) {
    const v = yield* queryRetry(call(kind.release, kind.key, commandTimeout), null, policy, now);
    const n = replies.integer(v, -1);
    if (n === 1) released += 1;
    else if (n === 0) break;
    else throw new ProtocolError(`${String(kind.release[0])} answered ${JSON.stringify(v)}`);
  }
  return released;
}

/** `LEASE.EXEC key token command...`: retried only where the command certainly did not run (a
 * refused connection, LOADING, TRYAGAIN, READONLY, ...), until `deadline`. A lost reply is not
 * retried (the write may have run): it throws {@link Unavailable}. */
export function* fencedExec(
  key: Key,
  tok: bigint,
  command: Arg[],
  deadline: number,
  policy: RetryPolicy,
  commandTimeout: number,
  now: Clock = monotonic,
): Machine<unknown> {
  if (command.length === 0) throw new TypeError("exec needs a command");
  const backoff = new Backoff(policy, now);
  for (;;) {
    const r = yield call(["LEASE.EXEC", key, tok.toString(), ...command], key, commandTimeout);
    if (!(r instanceof Failed)) return r;
    const f = classify(r.error, r.sent, r.address);
    if (!f.transient) throw f.error;
    const d = f.uncertain ? null : backoff.nextDelay(deadline, f);
    if (d === null) throw backoff.giveUp(f.error);
    yield sleep(d);
  }
}
