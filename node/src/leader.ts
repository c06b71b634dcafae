/** Leader election (`LEADER.*`). */

import { Connector, type Client } from "./connector.js";
import { NotAcquired } from "./errors.js";
import { acquire, Leadership, type GuardOptions } from "./guards.js";
import { defined, type WaitOptions } from "./lock.js";
import { LeaderObserver, type ObserverOptions } from "./observer.js";
import * as protocol from "./protocol.js";
import * as replies from "./replies.js";
import { checkTimeout, Spec, type LeaseOptions } from "./spec.js";

export interface ElectorOptions extends LeaseOptions, GuardOptions {
  /** This candidate's id (default: a fresh UUIDv4 per campaign). */
  candidate?: string | undefined;
}

/**
 * Campaigns for leadership of one key: the first waiting candidate is elected at once when
 * the leader resigns or lapses; every term has a higher term number (a fencing token).
 */
export class LeaderElector {
  readonly connector: Connector;
  readonly spec: Spec;
  private readonly defaults: GuardOptions;

  constructor(client: Client | Connector, key: protocol.Key, options: ElectorOptions = {}) {
    this.connector = Connector.of(client);
    this.spec = new Spec(key, options.candidate, options);
    this.defaults = { onLost: options.onLost, throwOnLost: options.throwOnLost, maxHold: options.maxHold };
  }

  get key(): protocol.Key {
    return this.spec.key;
  }

  private async elect(wait: number | null, options: WaitOptions): Promise<Leadership | null> {
    const [candidate, generated] = this.spec.ownerId();
    const kind = this.spec.leaderKind(candidate, generated);
    const g = { ...this.defaults, ...defined(options) };
    return acquire(this.connector, this.spec, kind, wait, options.signal, (grant) => new Leadership(this.connector, this.spec, kind, grant, g));
  }

  /** Campaigns until elected; throws {@link NotAcquired} if not elected within `timeout` ms. */
  async campaign(options: WaitOptions = {}): Promise<Leadership> {
    const lead = await this.elect(checkTimeout(options.timeout), options);
    if (lead === null) throw new NotAcquired(`not elected leader of ${String(this.key)} within ${String(options.timeout)} ms`);
    return lead;
  }

  /** Leadership if nobody leads now, else null. */
  tryLead(options: GuardOptions = {}): Promise<Leadership | null> {
    return this.elect(0, options);
  }

  /** `LEADER.CURRENT`: who leads now, or null. */
  async current(): Promise<replies.LeaderInfo | null> {
    const c = protocol.call(["LEADER.CURRENT", this.key], this.key, this.spec.commandTimeout);
    return replies.leaderInfo(await this.connector.run(protocol.queryRetry(c, null, this.spec.retry)));
  }

  /** A {@link LeaderObserver} of this election: who leads, and each change, without polling. */
  observe(options: ObserverOptions = {}): Promise<LeaderObserver> {
    return LeaderObserver.start(this.connector, this.key, { commandTimeout: this.spec.commandTimeout, ...defined(options) });
  }
}
