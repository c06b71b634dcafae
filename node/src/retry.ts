/** Retry of transient failures: classification, and exponential backoff with full jitter. */

import {
  ConnectionFailed,
  Deadlock,
  Fenced,
  LimitMismatch,
  LockGone,
  ModuleNotLoaded,
  PermitsMismatch,
  TtlRefused,
  Unavailable,
} from "./errors.js";

/**
 * How transient failures are retried. The delay before retry `n` (from 0) is uniformly random
 * between zero and `min(maxDelay, baseDelay * 2^n)` ("full jitter") and never reaches past the
 * caller's deadline. Without a deadline of its own (a `try*` call, an unlimited wait, a
 * release) an operation gives up after `budget` ms of uninterrupted failures, and after
 * `refusedBudget` ms when every connection was refused and nothing waits (a server that is not
 * there is not a hiccup).
 */
export interface RetryPolicy {
  baseDelay: number;
  maxDelay: number;
  budget: number;
  refusedBudget: number;
}

export const DEFAULT_RETRY: RetryPolicy = { baseDelay: 20, maxDelay: 1000, budget: 30_000, refusedBudget: 1000 };

export type Clock = () => number;
export const monotonic: Clock = () => performance.now();

/** One run of retries under a policy. */
export class Backoff {
  attempt = 0;
  readonly since: number;
  private onlyRefused = true;
  constructor(
    readonly policy: RetryPolicy,
    readonly now: Clock = monotonic,
    readonly rng: () => number = Math.random,
  ) {
    this.since = now();
  }

  /** The next delay, or null if `deadline` (or, without one, the budget) leaves no room. */
  nextDelay(deadline: number | null, failure?: Transient): number | null {
    if (failure !== undefined && !failure.refused) this.onlyRefused = false;
    let limit = deadline ?? this.since + this.policy.budget;
    if (deadline === null && this.onlyRefused && failure !== undefined) {
      limit = Math.min(limit, this.since + this.policy.refusedBudget);
    }
    const now = this.now();
    if (now >= limit) return null;
    const ceiling = Math.min(this.policy.maxDelay, this.policy.baseDelay * 2 ** Math.min(this.attempt, 30));
    this.attempt += 1;
    return Math.min(this.rng() * ceiling, limit - now);
  }

  /** The error to throw: the connection error itself when no connection could be made at all
   * (it names the address and the cause), else {@link Unavailable}. */
  giveUp(last: unknown): Unavailable | ConnectionFailed {
    if (this.onlyRefused && last instanceof ConnectionFailed && !last.sent) return last;
    return new Unavailable(this.attempt + 1, this.now() - this.since, last);
  }
}

/** Worth retrying. `uncertain`: the request may have run (its reply was lost); `refused`: no
 * connection could be made at all. */
export interface Transient {
  transient: true;
  uncertain: boolean;
  refused: boolean;
  error: unknown;
}

/** Not worth retrying: throw `error`. */
export interface Fatal {
  transient: false;
  error: unknown;
}

export type Failure = Transient | Fatal;

// Error codes after which the request certainly did not run and asking again can succeed.
const RETRY_CODES = new Set(["LOADING", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY", "MOVED", "ASK", "BUSY"]);

/** The first word of an error reply (`"DEADLOCK"` for `-DEADLOCK ...`). */
export function errorCode(err: unknown): string {
  const text = err instanceof Error ? err.message.trim() : "";
  return text.split(" ", 1)[0] ?? "";
}

/** Whether `err` is an error reply of the server (ioredis's ReplyError). */
export function isReplyError(err: unknown): err is Error {
  return err instanceof Error && err.name === "ReplyError";
}

function numberIn(text: string, re: RegExp): number | undefined {
  const m = re.exec(text);
  return m?.[1] !== undefined ? Number(m[1]) : undefined;
}

/** Sorts an error into transient (and whether the request may have run) or fatal, turning the
 * server's replies that this package names into its typed errors. `address`: the server's. */
export function classify(err: unknown, sent: boolean, address = "redis"): Failure {
  if (err instanceof ConnectionFailed) {
    return { transient: true, uncertain: sent && err.sent, refused: !err.sent && err.code === "ECONNREFUSED", error: err };
  }
  if (!isReplyError(err)) return { transient: false, error: err };
  const text = err.message;
  const code = errorCode(err);
  if (RETRY_CODES.has(code)) return { transient: true, uncertain: false, refused: false, error: err };
  // A master demoted to replica (a failover) unblocks its waiters; they were not granted
  // there, so ask again. An operator's CLIENT UNBLOCK ... ERROR stays an error.
  if (code === "UNBLOCKED" && text.includes("instance state changed")) {
    return { transient: true, uncertain: false, refused: false, error: err };
  }
  return { transient: false, error: typed(err, text, code, address) };
}

function typed(err: Error, text: string, code: string, address: string): unknown {
  switch (code) {
    case "DEADLOCK":
      return new Deadlock(text);
    case "LOCKGONE":
      return new LockGone(text);
    case "FENCED":
      return new Fenced(text);
    case "LIMIT":
      return new LimitMismatch(text, numberIn(text, /limit is (\d+)/));
    case "PERMITS":
      if (/holds \d+ permits/.test(text)) return new PermitsMismatch(text, numberIn(text, /holds (\d+) permits/));
      return err;
  }
  if (/^ERR unknown command '(RWLOCK|LEADER|SEMAPHORE|LEASE)\./i.test(text)) return new ModuleNotLoaded(address, text);
  if (text.startsWith("ERR ttl must be")) {
    const ttl = numberIn(text, /got '(\d+)'/) ?? NaN;
    return new TtlRefused(ttl, numberIn(text, /from 1 to (\d+) ms/), text);
  }
  if (text.includes("this semaphore's limit is")) return new LimitMismatch(text, numberIn(text, /limit is (\d+)/));
  if (/this owner holds \d+ permits/.test(text)) return new PermitsMismatch(text, numberIn(text, /holds (\d+) permits/));
  return err;
}
