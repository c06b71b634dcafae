/**
 * The errors of this package. Every one extends {@link LeaseError}; errors that Redis itself
 * answers and that no class here describes (WRONGTYPE, NOPERM, ...) are thrown as ioredis's
 * own `ReplyError`.
 */

/** Why a lease was lost (the `reason` of {@link LeaseLost}). */
export type LossReason =
  /** No renewal succeeded before the local validity bound passed (the server was unreachable,
   * paused or too slow). Nobody else can have been granted the hold yet. */
  | "expired"
  /** The server answered that this owner holds nothing any more (the lease lapsed on the
   * server, or the key was deleted). */
  | "revoked"
  /** `LEASE.EXEC` answered `FENCED`: the hold with this token is not live. */
  | "fenced"
  /** No renewal reached the replicas asked for (`replicas: n`) before the bound passed. */
  | "not-replicated"
  /** The hold reached its `maxHold` and was given back. */
  | "max-hold"
  /** A renewal was answered with an error that retrying cannot fix. */
  | "failed";

const REASONS: Record<LossReason, string> = {
  expired: "it could not be renewed before it would lapse",
  revoked: "the server no longer counts this holder",
  fenced: "LEASE.EXEC found the hold not live (FENCED)",
  "not-replicated": "no renewal reached enough replicas in time",
  "max-hold": "it reached its maxHold and was given back",
  failed: "a renewal failed with a permanent error",
};

/** What a reason means, in words. */
export function describeReason(reason: LossReason): string {
  return REASONS[reason];
}

/** Base class of this package's errors. */
export class LeaseError extends Error {
  constructor(message: string, options?: ErrorOptions) {
    super(message, options);
    this.name = new.target.name;
  }
}

/** The lock, leadership or permits were not granted within the timeout. */
export class NotAcquired extends LeaseError {}

/** The lease can no longer be proven valid: stop the protected work. */
export class LeaseLost extends LeaseError {
  readonly reason: LossReason;
  constructor(reason: LossReason, message?: string, options?: ErrorOptions) {
    super(message ?? `lease lost: ${describeReason(reason)}`, options);
    this.reason = reason;
  }
}

/** `LEASE.EXEC` refused to run the command: the hold with this token is not live (`-FENCED`). */
export class Fenced extends LeaseLost {
  constructor(message: string) {
    super("fenced", message);
  }
}

/** An upgrade from read to write was refused: another reader of the key already waits to
 * upgrade (`-DEADLOCK`). Release the read lock and try again. */
export class Deadlock extends LeaseError {}

/** The key was deleted, renamed, moved or flushed while this request waited (`-LOCKGONE`). */
export class LockGone extends LeaseError {}

/** The semaphore exists with another limit (`-LIMIT`; before that code, `ERR this semaphore's
 * limit is N`). `limit` is the server's, when it said. */
export class LimitMismatch extends LeaseError {
  readonly limit: number | undefined;
  constructor(message: string, limit: number | undefined) {
    super(message);
    this.limit = limit;
  }
}

/** This owner already holds another number of permits of the semaphore (`-PERMITS`; before
 * that code, `ERR this owner holds N permits`). `held` is the number held, when it said. */
export class PermitsMismatch extends LeaseError {
  readonly held: number | undefined;
  constructor(message: string, held: number | undefined) {
    super(message);
    this.held = held;
  }
}

/** The server refused the ttl (above its `lease.max-ttl`, or its `lease.quarantine` while set). */
export class TtlRefused extends LeaseError {
  /** The ttl asked for, in ms. */
  readonly ttl: number;
  /** The largest ttl the server accepts, in ms, when it said. */
  readonly maxTtl: number | undefined;
  constructor(ttl: number, maxTtl: number | undefined, serverText: string) {
    super(
      `ttl ${ttl} ms refused by the server` +
        (maxTtl !== undefined ? `: its largest is ${maxTtl} ms (lease.max-ttl, or lease.quarantine while set)` : "") +
        `; ttl is in milliseconds, as setTimeout (server said: ${serverText})`,
    );
    this.ttl = ttl;
    this.maxTtl = maxTtl;
  }
}

/** The server does not know the module's commands: the redis-lease module is not loaded. */
export class ModuleNotLoaded extends LeaseError {
  readonly address: string;
  constructor(address: string, serverText: string) {
    super(
      `the redis-lease module is not loaded on ${address} (${serverText}); load it with ` +
        "`redis-server --loadmodule /path/to/libredis_lease.so`, a `loadmodule` line in redis.conf, " +
        "or `MODULE LOAD /path/to/libredis_lease.so`",
    );
    this.address = address;
  }
}

/** A connection to a Redis server failed: `address` is host:port, `cause` the system's error. */
export class ConnectionFailed extends LeaseError {
  readonly address: string;
  /** The system error code (`ECONNREFUSED`, `ECONNRESET`, `ETIMEDOUT`, ...) if there was one. */
  readonly code: string | undefined;
  /** Whether the request may have reached the server (its reply was lost). */
  readonly sent: boolean;
  constructor(address: string, what: string, code: string | undefined, sent: boolean, cause?: unknown) {
    super(`redis at ${address}: ${what}`, cause === undefined ? undefined : { cause });
    this.address = address;
    this.code = code;
    this.sent = sent;
  }
}

/** Only transient failures were seen until the deadline (or the retry budget) ran out. */
export class Unavailable extends LeaseError {
  readonly attempts: number;
  /** ms from the first failure to giving up. */
  readonly elapsed: number;
  readonly last: unknown;
  constructor(attempts: number, elapsed: number, last: unknown) {
    super(
      `redis unavailable after ${attempts} attempt${attempts === 1 ? "" : "s"} over ${Math.round(elapsed)} ms: ${messageOf(last)}`,
      { cause: last },
    );
    this.attempts = attempts;
    this.elapsed = elapsed;
    this.last = last;
  }
}

/** Fewer replicas than asked for (`replicas: n`) acknowledged a grant; it was given back. */
export class NotReplicated extends LeaseError {
  readonly acked: number;
  readonly wanted: number;
  constructor(acked: number, wanted: number) {
    super(`the grant reached ${acked} of the ${wanted} replicas asked for; it was given back`);
    this.acked = acked;
    this.wanted = wanted;
  }
}

/** The server answered something this client does not understand (a contract mismatch). */
export class ProtocolError extends LeaseError {}

export function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message;
  return String(e);
}
