/** Settings shared by locks, semaphores and electors: validation, owner ids and the
 * {@link protocol.Kind} of each request. */

import { randomUUID } from "node:crypto";

import * as protocol from "./protocol.js";
import { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
import { LeaseTiming } from "./timing.js";

/** The largest semaphore limit the module accepts. */
export const MAX_LIMIT = 2 ** 31 - 1;

/** Options of every lock, semaphore and elector. Times in ms, as `setTimeout`. */
export interface LeaseOptions {
  /** The lease, in ms (default 10000). Renewed by the watchdog every `renewEvery`. */
  ttl?: number | undefined;
  /** How often the watchdog renews, in ms (default a third of the ttl). */
  renewEvery?: number | undefined;
  /** How long to wait for the reply of a request that does not wait in the server (default 2000 ms). */
  commandTimeout?: number | undefined;
  /** How transient failures are retried (defaults: {@link DEFAULT_RETRY}). */
  retry?: Partial<RetryPolicy> | undefined;
  /** Grants and renewals count only once this many replicas acknowledged them (`WAIT n`):
   * a failover to one of them keeps the hold. Default 0. */
  replicas?: number | undefined;
  /** How long to wait for those acknowledgements, in ms (default the command timeout). */
  replicaTimeout?: number | undefined;
}

/** The timeout of a waiting call, in ms: undefined waits without a limit, 0 tries once. */
export function checkTimeout(timeout: number | undefined): number | null {
  if (timeout === undefined) return null;
  if (typeof timeout !== "number" || Number.isNaN(timeout)) {
    throw new TypeError(`timeout must be a number of milliseconds or undefined, not ${String(timeout)}`);
  }
  return Math.max(timeout, 0);
}

/** What every lock, semaphore and elector is made of. */
export class Spec {
  readonly timing: LeaseTiming;
  readonly retry: RetryPolicy;
  readonly commandTimeout: number;
  readonly acks: protocol.Acks | undefined;

  constructor(
    readonly key: protocol.Key,
    readonly owner: string | undefined,
    options: LeaseOptions,
  ) {
    if (typeof key !== "string" && !Buffer.isBuffer(key)) throw new TypeError("key must be a string or a Buffer");
    if (key.length === 0) throw new RangeError("key must not be empty");
    if (owner !== undefined && (typeof owner !== "string" || owner.length === 0)) {
      throw new TypeError("owner must be a non-empty string");
    }
    this.timing = new LeaseTiming(options.ttl ?? 10_000, options.renewEvery);
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    this.commandTimeout = options.commandTimeout ?? 2000;
    if (!(this.commandTimeout > 0)) throw new RangeError("commandTimeout must be positive");
    const replicas = options.replicas ?? 0;
    if (!Number.isInteger(replicas) || replicas < 0) throw new RangeError("replicas must be a whole number >= 0");
    this.acks = replicas > 0 ? { replicas, timeout: Math.ceil(options.replicaTimeout ?? this.commandTimeout) } : undefined;
  }

  /** The owner for one grant, and whether it is ours alone (generated). */
  ownerId(): [string, boolean] {
    return this.owner !== undefined ? [this.owner, false] : [randomUUID(), true];
  }

  /** Releases retry for at most one ttl: after that the lease has lapsed anyway. */
  releasePolicy(): RetryPolicy {
    return { ...this.retry, budget: this.timing.ttl, refusedBudget: Math.min(this.retry.refusedBudget, this.timing.ttl) };
  }

  lockKind(mode: "read" | "write"): protocol.Kind {
    const [owner, generated] = this.ownerId();
    return protocol.lockKind(this.key, owner, mode, this.timing.ttl, generated, this.acks);
  }

  semaphoreKind(limit: number, permits: number): protocol.Kind {
    checkPermits(limit, permits);
    const [owner, generated] = this.ownerId();
    return protocol.semaphoreKind(this.key, owner, limit, permits, this.timing.ttl, generated, this.acks);
  }

  leaderKind(candidate: string, generated: boolean): protocol.Kind {
    return protocol.leaderKind(this.key, candidate, this.timing.ttl, generated, this.acks);
  }
}

export function checkLimit(limit: number): number {
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_LIMIT) {
    throw new RangeError(`limit must be an integer from 1 to ${MAX_LIMIT}, not ${String(limit)}`);
  }
  return limit;
}

export function checkPermits(limit: number, permits: number): void {
  if (!Number.isInteger(permits) || permits < 1 || permits > limit) {
    throw new RangeError(`permits must be an integer from 1 to the limit ${limit}, not ${String(permits)}`);
  }
}
