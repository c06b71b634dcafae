/** Counting semaphores (`SEMAPHORE.*`). */

import { Connector, type Client } from "./connector.js";
import { NotAcquired } from "./errors.js";
import { acquire, Permit, type GuardOptions } from "./guards.js";
import { defined, type WaitOptions } from "./lock.js";
import * as protocol from "./protocol.js";
import * as replies from "./replies.js";
import { checkLimit, checkTimeout, Spec, type LeaseOptions } from "./spec.js";

export interface SemaphoreOptions extends LeaseOptions, GuardOptions {
  /** At most this many permits are held at once (1 to 2^31-1). Every client of a key must
   * name the same limit while the key exists ({@link LimitMismatch} otherwise). */
  limit: number;
  /** The owner id (default: a fresh UUIDv4 per grant). */
  owner?: string | undefined;
}

export interface AcquireOptions extends WaitOptions {
  /** How many permits (default 1). */
  permits?: number | undefined;
}

/** A fair counting semaphore with a lease per holder. */
export class Semaphore {
  readonly connector: Connector;
  readonly spec: Spec;
  readonly limit: number;
  private readonly defaults: GuardOptions;

  constructor(client: Client | Connector, key: protocol.Key, options: SemaphoreOptions) {
    this.connector = Connector.of(client);
    this.limit = checkLimit(options.limit);
    this.spec = new Spec(key, options.owner, options);
    this.defaults = { onLost: options.onLost, throwOnLost: options.throwOnLost, maxHold: options.maxHold };
  }

  get key(): protocol.Key {
    return this.spec.key;
  }

  private async take(wait: number | null, options: AcquireOptions): Promise<Permit | null> {
    const permits = options.permits ?? 1;
    const kind = this.spec.semaphoreKind(this.limit, permits);
    const g = { ...this.defaults, ...defined(options) };
    return acquire(this.connector, this.spec, kind, wait, options.signal, (grant) => new Permit(this.connector, this.spec, kind, grant, g, permits));
  }

  /** `permits` permits; throws {@link NotAcquired} if not granted within `timeout` ms. */
  async acquire(options: AcquireOptions = {}): Promise<Permit> {
    const p = await this.take(checkTimeout(options.timeout), options);
    if (p === null) throw new NotAcquired(`${options.permits ?? 1} permits of ${String(this.key)} not granted within ${String(options.timeout)} ms`);
    return p;
  }

  /** The permits if free now, else null. */
  tryAcquire(options: Omit<AcquireOptions, "timeout" | "signal"> = {}): Promise<Permit | null> {
    return this.take(0, options);
  }

  /** `SEMAPHORE.INFO`: limit, used, holders, waiters. */
  async info(): Promise<replies.SemaphoreInfo> {
    const c = protocol.call(["SEMAPHORE.INFO", this.key], this.key, this.spec.commandTimeout);
    return replies.semaphoreInfo(await this.connector.run(protocol.queryRetry(c, null, this.spec.retry)));
  }
}
