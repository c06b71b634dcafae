/** Read-write locks (`RWLOCK.*`). */

import { Connector, type Client } from "./connector.js";
import { NotAcquired } from "./errors.js";
import { acquire, LockGuard, type GuardOptions } from "./guards.js";
import * as protocol from "./protocol.js";
import * as replies from "./replies.js";
import { checkTimeout, Spec, type LeaseOptions } from "./spec.js";

/** Options of a lock: lease timing, retries, replicas, and the defaults of its guards. */
export interface LockOptions extends LeaseOptions, GuardOptions {
  /** The owner id (default: a fresh UUIDv4 per grant). A chosen id is reentrant across
   * processes: two guards of one id are two holds of one owner. */
  owner?: string | undefined;
}

/** How to wait for a grant. */
export interface WaitOptions extends GuardOptions {
  /** The longest wait in ms (waiting inside the server, in arrival order). Default: no limit. */
  timeout?: number | undefined;
  /** Cancels the wait: the promise rejects with the signal's reason, nothing is held. */
  signal?: AbortSignal | undefined;
}

/**
 * A distributed read-write lock on one key: fair (arrival order), fenced (every grant carries
 * a token), renewed by a watchdog, waiting inside the server.
 *
 * ```ts
 * const lock = new RwLock(redis, "orders", { ttl: 5000 });
 * { await using guard = await lock.write({ timeout: 10000 }); await guard.exec("SET", "k", "v"); }
 * ```
 */
export class RwLock {
  readonly connector: Connector;
  readonly spec: Spec;
  private readonly defaults: GuardOptions;

  constructor(client: Client | Connector, key: protocol.Key, options: LockOptions = {}) {
    this.connector = Connector.of(client);
    this.spec = new Spec(key, options.owner, options);
    this.defaults = { onLost: options.onLost, throwOnLost: options.throwOnLost, maxHold: options.maxHold };
  }

  get key(): protocol.Key {
    return this.spec.key;
  }

  /** Acquires in `mode`, waiting at most `wait` ms (null: no limit; 0: try once). Answers
   * null if not granted in time. */
  async acquire(mode: "read" | "write", wait: number | null, options: WaitOptions = {}): Promise<LockGuard | null> {
    const kind = this.spec.lockKind(mode);
    const g = { ...this.defaults, ...defined(options) };
    return acquire(this.connector, this.spec, kind, wait, options.signal, (grant) => new LockGuard(this.connector, this.spec, kind, grant, g, mode));
  }

  private async must(mode: "read" | "write", options: WaitOptions): Promise<LockGuard> {
    const g = await this.acquire(mode, checkTimeout(options.timeout), options);
    if (g === null) throw new NotAcquired(`${mode} lock on ${String(this.key)} not granted within ${String(options.timeout)} ms`);
    return g;
  }

  /** The write lock; throws {@link NotAcquired} if not granted within `timeout`. */
  write(options: WaitOptions = {}): Promise<LockGuard> {
    return this.must("write", options);
  }

  /** A read lock (shared with other readers); throws {@link NotAcquired} on timeout. */
  read(options: WaitOptions = {}): Promise<LockGuard> {
    return this.must("read", options);
  }

  /** The write lock if it is free now, else null. */
  tryWrite(options: GuardOptions = {}): Promise<LockGuard | null> {
    return this.acquire("write", 0, options);
  }

  /** A read lock if one can be granted now, else null. */
  tryRead(options: GuardOptions = {}): Promise<LockGuard | null> {
    return this.acquire("read", 0, options);
  }

  /** `RWLOCK.INFO`: holders, mode, waiters, last token. */
  async info(): Promise<replies.LockInfo> {
    const c = protocol.call(["RWLOCK.INFO", this.key], this.key, this.spec.commandTimeout);
    return replies.lockInfo(await this.connector.run(protocol.queryRetry(c, null, this.spec.retry)));
  }
}

/** `o` without its undefined fields (so that they do not override defaults). */
export function defined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
