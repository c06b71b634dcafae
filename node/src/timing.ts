/** Lease timing: the ttl as the server takes it, the renewal period and the drift margin (ms). */

/** The longest `WAIT` the module accepts, in ms. */
export const MAX_WAIT_MS = 1e12;

/** The shortest ttl accepted: below it renewals every third could not keep up (and a ttl of a
 * few ms is almost always seconds meant as ms). */
export const MIN_TTL_MS = 30;

/** A whole number of ms for the server, rounded up, at least 1. */
export function wholeMs(ms: number, what: string): number {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms <= 0) {
    throw new RangeError(`${what} must be a positive, finite number of milliseconds, not ${String(ms)}`);
  }
  return Math.max(1, Math.ceil(Math.round(ms * 1e6) / 1e6));
}

/**
 * Timing of one lease, as the other clients': renewal every third of the ttl, drift margin 1%
 * of the ttl + 2 ms. A lease granted or renewed by a request sent at `t` is valid until
 * `t + ttl - margin` on this process's monotonic clock.
 */
export class LeaseTiming {
  readonly ttl: number;
  readonly renewEvery: number;
  readonly margin: number;

  constructor(ttl: number, renewEvery?: number) {
    this.ttl = wholeMs(ttl, "ttl");
    if (this.ttl < MIN_TTL_MS) {
      throw new RangeError(
        `ttl ${this.ttl} ms is too short to renew (at least ${MIN_TTL_MS} ms); ttl is in milliseconds, as setTimeout` +
          (this.ttl <= 10 ? ` (did you mean ${this.ttl * 1000}?)` : ""),
      );
    }
    this.margin = this.ttl * 0.01 + 2;
    this.renewEvery = renewEvery ?? this.ttl / 3;
    if (!(this.renewEvery >= 1) || this.renewEvery + this.margin >= this.ttl) {
      throw new RangeError(
        `renewEvery ${this.renewEvery} ms must be at least 1 ms and leave the drift margin ${this.margin} ms of the ttl ${this.ttl} ms`,
      );
    }
  }

  /** The validity bound of a lease proven by a request sent at `sent` (performance.now()). */
  validUntil(sent: number): number {
    return sent + Math.max(this.ttl - this.margin, 0);
  }

  /** How long to try confirming a fresh grant with a renewal: until its own bound, and at
   * least one command timeout (the bound may have passed in the queue). */
  confirmDeadline(sent: number, now: number, commandTimeout: number): number {
    return Math.max(this.validUntil(sent), now + commandTimeout);
  }
}

/** A `WAIT` argument for `left` ms (whole ms, rounded down, within the server's range). */
export function waitMs(left: number): number {
  return Math.floor(Math.min(Math.max(left, 1), MAX_WAIT_MS));
}
