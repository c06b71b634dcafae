/** Guards: a held lease, its watchdog, its signal and its release. */

import type { Connector } from "./connector.js";
import { LeaseLost, describeReason, type LossReason } from "./errors.js";
import * as protocol from "./protocol.js";
import type { Spec } from "./spec.js";

const STOPPED = new Error("the guard stopped renewing");

/** What the watchdog, the timers and the guard share: never the guard itself, so a guard
 * dropped unreleased can be collected (and is then released by the finalizer). */
class LeaseState {
  readonly lostController = new AbortController();
  readonly stopController = new AbortController();
  lost: LeaseLost | null = null;
  released = false;
  private expiry: NodeJS.Timeout | undefined;
  private maxHoldTimer: NodeJS.Timeout | undefined;
  watchdog: Promise<unknown> = Promise.resolve();

  constructor(
    public validUntil: number,
    readonly onLost: ((err: LeaseLost) => void) | undefined,
    readonly giveBack: () => Promise<number>,
  ) {
    this.arm();
  }

  /** Aborts the signal at the validity bound unless a renewal moves it first. */
  private arm(): void {
    clearTimeout(this.expiry);
    if (this.lost !== null || this.released) return;
    this.expiry = setTimeout(() => { this.expireIfDue(); }, Math.max(this.validUntil - performance.now(), 0) + 1);
    this.expiry.unref();
  }

  setMaxHold(ms: number): void {
    this.maxHoldTimer = setTimeout(() => {
      if (this.lost !== null || this.released) return;
      this.lose("max-hold");
      void this.giveBack().catch(() => undefined);
    }, ms);
    this.maxHoldTimer.unref();
  }

  publish = (bound: number | null, reason: LossReason | null): void => {
    if (this.lost !== null || this.released) return;
    if (reason === null && bound !== null) {
      this.validUntil = bound;
      this.arm();
      return;
    }
    this.lose(reason ?? "failed");
  };

  lose(reason: LossReason, err?: LeaseLost): void {
    if (this.lost !== null) return;
    this.lost = err ?? new LeaseLost(reason);
    this.stop();
    this.lostController.abort(this.lost);
    if (this.onLost !== undefined) {
      try {
        this.onLost(this.lost);
      } catch (e) {
        // A throwing callback must not break the client: report it as Node reports others.
        queueMicrotask(() => {
          throw e;
        });
      }
    }
  }

  stop(): void {
    clearTimeout(this.expiry);
    clearTimeout(this.maxHoldTimer);
    // A reason of our own: abort() without one makes a DOMException, on every release.
    this.stopController.abort(STOPPED);
  }

  expireIfDue(): void {
    if (this.lost === null && !this.released && performance.now() >= this.validUntil) this.lose("expired");
  }
}

const finalizer = new FinalizationRegistry<LeaseState>((state) => {
  if (state.released) return;
  state.released = true;
  state.stop();
  void state.giveBack().catch(() => undefined);
});

/** Options of every guard. */
export interface GuardOptions {
  /** Called once when the lease is lost (not when it is released). */
  onLost?: ((err: LeaseLost) => void) | undefined;
  /** Whether leaving an `await using` scope whose hold was lost during it throws the
   * {@link LeaseLost} (default true). With false, check `guard.signal` or `guard.lost`. */
  throwOnLost?: boolean | undefined;
  /** Give the hold back after this many ms, whatever happens (reason "max-hold"). */
  maxHold?: number | undefined;
}

/**
 * A held lease. Its watchdog renews it every third of the ttl; `signal` is aborted (its reason
 * a {@link LeaseLost}) as soon as a renewal finds the hold gone, or when the lease can no
 * longer be proven valid (send time of the last grant or renewal + ttl - drift margin), before
 * the server could grant it to anyone else. A loss is final. Release with `await
 * guard.release()` or by leaving an `await using` scope; releasing twice is harmless; a guard
 * dropped unreleased is released once collected.
 */
export class Guard implements AsyncDisposable {
  /** The key. */
  readonly key: protocol.Key;
  /** The owner (or candidate) id this hold is registered under. */
  readonly owner: string;
  /** The fencing token of this hold (a lock's or a semaphore's; an election's term). */
  readonly token: bigint;
  private readonly state: LeaseState;
  private readonly throwOnLost: boolean;

  /** @internal */
  constructor(
    private readonly conn: Connector,
    private readonly spec: Spec,
    kind: protocol.Kind,
    grant: protocol.Grant,
    options: GuardOptions,
  ) {
    this.key = kind.key;
    this.owner = kind.owner;
    this.token = grant.token;
    this.throwOnLost = options.throwOnLost ?? true;
    // A lost guard of a caller-chosen owner sends no release: a newer guard of the same id
    // would lose its hold. The lost hold lapses alone.
    const releaseWhenLost = kind.generated;
    const giveBack = async (): Promise<number> => {
      await state.watchdog;
      if (state.lost !== null && !releaseWhenLost && state.lost.reason !== "max-hold") return 0;
      return conn.run(protocol.release(kind, grant.sweep, spec.releasePolicy(), spec.commandTimeout));
    };
    const state = new LeaseState(spec.timing.validUntil(grant.sent), options.onLost, giveBack);
    this.state = state;
    if (options.maxHold !== undefined) state.setMaxHold(options.maxHold);
    const dog = protocol.watchdog(kind, spec.timing, spec.retry, spec.commandTimeout, grant.sent, state.publish);
    state.watchdog = conn.run(dog, state.stopController.signal).catch(() => { state.publish(null, "failed"); });
    finalizer.register(this, state, this);
  }

  /** Aborted with a {@link LeaseLost} reason when the lease is lost (not on release). */
  get signal(): AbortSignal {
    this.state.expireIfDue();
    return this.state.lostController.signal;
  }

  /** The loss, or null while held (or once released without a loss). */
  get lost(): LeaseLost | null {
    this.state.expireIfDue();
    return this.state.lost;
  }

  /** Whether the lease is held and provably valid now. */
  get held(): boolean {
    this.state.expireIfDue();
    return !this.state.released && this.state.lost === null;
  }

  /** Until when (performance.now() ms) the lease is certainly valid; null unless held. */
  get validUntil(): number | null {
    return this.held ? this.state.validUntil : null;
  }

  /** Waits until the lease is lost (or released) or `timeout` ms pass; answers whether it is
   * no longer held. Computed from the lease's own deadline, so a process that was frozen past
   * it answers true at once. */
  async waitLost(timeout?: number): Promise<boolean> {
    const end = timeout === undefined ? Infinity : performance.now() + timeout;
    for (;;) {
      if (!this.held) return true;
      const left = Math.min(this.state.validUntil, end) - performance.now();
      if (left <= 0 && performance.now() >= end) return !this.held;
      await new Promise<void>((resolve) => {
        const done = (): void => {
          clearTimeout(t);
          this.state.lostController.signal.removeEventListener("abort", done);
          this.state.stopController.signal.removeEventListener("abort", done);
          resolve();
        };
        const t = setTimeout(done, Math.max(left, 0) + 1);
        this.state.lostController.signal.addEventListener("abort", done, { once: true });
        this.state.stopController.signal.addEventListener("abort", done, { once: true });
      });
    }
  }

  /** Throws the {@link LeaseLost} unless the lease is held. */
  check(): void {
    if (this.held) return;
    throw this.state.lost ?? new LeaseLost("revoked", "lease released");
  }

  /** `LEASE.EXEC key token command...`: runs `command` only while this hold is live (checked
   * by Redis itself, atomically). Throws {@link Fenced} when it is not (nothing ran); the guard
   * is lost ("fenced") from then on, unless it is a read lock's. */
  async exec(command: string, ...args: protocol.Arg[]): Promise<unknown> {
    const bound = Math.max(this.state.validUntil, performance.now() + this.spec.commandTimeout);
    try {
      return await this.conn.run(
        protocol.fencedExec(this.key, this.token, [command, ...args], bound, this.spec.retry, this.spec.commandTimeout),
      );
    } catch (e) {
      if (e instanceof LeaseLost && e.reason === "fenced" && this.fencesWrites()) this.state.lose("fenced", e);
      throw e;
    }
  }

  /** @internal Whether the server accepts this hold's token for a fenced write. */
  protected fencesWrites(): boolean {
    return true;
  }

  /** Stops renewing and releases the hold. Answers whether the server still counted it. A
   * second call is harmless (answers false). */
  async release(): Promise<boolean> {
    if (this.state.released) return false;
    this.state.released = true;
    this.state.stop();
    finalizer.unregister(this);
    return (await this.state.giveBack()) > 0;
  }

  /** Stops renewing without releasing: the lease lapses on the server after its ttl. */
  abandon(): void {
    this.state.released = true;
    this.state.stop();
    finalizer.unregister(this);
  }

  /** Releases; then throws the {@link LeaseLost} if the hold was lost while held (unless
   * `throwOnLost: false`). */
  async [Symbol.asyncDispose](): Promise<void> {
    const lostBefore = this.lost;
    await this.release();
    if (lostBefore !== null && this.throwOnLost) throw lostBefore;
  }

  toString(): string {
    const why = this.state.lost ? ` lost: ${describeReason(this.state.lost.reason)}` : "";
    return `${this.constructor.name}(key=${String(this.key)}, owner=${this.owner}, token=${this.token}, held=${this.held}${why})`;
  }
}

/** A held read or write lock. */
export class LockGuard extends Guard {
  /** @internal */
  constructor(conn: Connector, spec: Spec, kind: protocol.Kind, grant: protocol.Grant, options: GuardOptions, readonly mode: "read" | "write") {
    super(conn, spec, kind, grant, options);
  }

  protected override fencesWrites(): boolean {
    return this.mode === "write";
  }
}

/** Held leadership: `term` is the fencing token of this term; `resign()` steps down. */
export class Leadership extends Guard {
  /** The term (the election's fencing token). */
  get term(): bigint {
    return this.token;
  }

  /** Steps down (the next waiting candidate is elected at once). */
  resign(): Promise<boolean> {
    return this.release();
  }
}

/** Held semaphore permits. */
export class Permit extends Guard {
  /** @internal */
  constructor(conn: Connector, spec: Spec, kind: protocol.Kind, grant: protocol.Grant, options: GuardOptions, readonly permits: number) {
    super(conn, spec, kind, grant, options);
  }
}

/** Runs one acquisition; a grant becomes a guard. If it ends abnormally (an error, an abort)
 * while a grant of ours may exist, that grant is released in the background. */
export async function acquire<G extends Guard>(
  conn: Connector,
  spec: Spec,
  kind: protocol.Kind,
  wait: number | null,
  signal: AbortSignal | undefined,
  make: (g: protocol.Grant) => G,
): Promise<G | null> {
  const acq = new protocol.Acquisition(kind, spec.timing, spec.retry, spec.commandTimeout, wait, spec.releasePolicy());
  try {
    const grant = await conn.run(acq.run(), signal);
    return grant === null ? null : make(grant);
  } catch (e) {
    if (acq.armed) void conn.run(protocol.release(kind, true, spec.releasePolicy(), spec.commandTimeout)).catch(() => undefined);
    throw e;
  }
}
