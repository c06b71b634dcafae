/** Reading the module's replies (RESP2: flat field/value arrays; integers as strings, since
 * this package's connections use ioredis's `stringNumbers` so that tokens keep every digit). */

import { ProtocolError } from "./errors.js";

export function text(v: unknown): string {
  if (Buffer.isBuffer(v)) return v.toString("utf8");
  return String(v);
}

export function integer(v: unknown, fallback = 0): number {
  if (typeof v === "number") return Number.isInteger(v) ? v : fallback;
  if (typeof v === "string" || Buffer.isBuffer(v)) {
    const s = text(v).trim();
    if (/^-?\d+$/.test(s)) return Number(s);
  }
  return fallback;
}

/** A token or term: a positive integer, exact (bigint). */
export function token(v: unknown, what = "token"): bigint {
  const s = typeof v === "number" || typeof v === "bigint" ? String(v) : v === null || v === undefined ? "" : text(v).trim();
  if (/^\d+$/.test(s)) {
    const t = BigInt(s);
    if (t >= 1n) return t;
  }
  throw new ProtocolError(`expected a ${what}, got ${JSON.stringify(v === undefined ? null : text(v))}`);
}

function bigOr0(v: unknown): bigint {
  const s = v === null || v === undefined ? "" : text(v).trim();
  return /^\d+$/.test(s) ? BigInt(s) : 0n;
}

/** A map reply (a flat field/value array), keys lower-cased. */
export function fields(v: unknown): Map<string, unknown> {
  if (!Array.isArray(v) || v.length % 2 !== 0) throw new ProtocolError(`expected a map, got ${JSON.stringify(v)}`);
  const m = new Map<string, unknown>();
  for (let i = 0; i < v.length; i += 2) m.set(text(v[i]).toLowerCase(), v[i + 1]);
  return m;
}

function items(v: unknown): unknown[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) throw new ProtocolError(`expected an array, got ${JSON.stringify(v)}`);
  return v;
}

/** One holder in `RWLOCK.INFO` / `SEMAPHORE.INFO`. */
export interface Holder {
  owner: string;
  /** "read" or "write" for a lock; "" for a semaphore. */
  mode: string;
  /** Reentrant grants (lock) or 1 (semaphore). */
  count: number;
  /** Lease ms left when read. */
  ttl: number;
  token: bigint;
  /** Permits held (semaphore only; 0 for a lock). */
  permits: number;
}

function holder(v: unknown): Holder {
  const f = fields(v);
  return {
    owner: text(f.get("owner") ?? ""),
    mode: f.has("mode") ? text(f.get("mode")) : "",
    count: Math.max(integer(f.get("count") ?? 1, 1), 0),
    ttl: Math.max(integer(f.get("ttl")), 0),
    token: bigOr0(f.get("token")),
    permits: Math.max(integer(f.get("permits")), 0),
  };
}

/** The reply of `RWLOCK.INFO`. `mode` is null when nobody holds the lock. */
export interface LockInfo {
  mode: "read" | "write" | null;
  holders: Holder[];
  waiters: number;
  /** The last token handed out. */
  token: bigint;
}

export function lockInfo(v: unknown): LockInfo {
  const f = fields(v);
  const mode = f.has("mode") ? text(f.get("mode")) : "none";
  return {
    mode: mode === "read" || mode === "write" ? mode : null,
    holders: items(f.get("holders")).map(holder),
    waiters: Math.max(integer(f.get("waiters")), 0),
    token: bigOr0(f.get("token")),
  };
}

/** Who leads an election (the reply of `LEADER.CURRENT`). */
export interface LeaderInfo {
  candidate: string;
  term: bigint;
  /** Lease ms it had left when read. */
  ttl: number;
}

export function leaderInfo(v: unknown): LeaderInfo | null {
  if (v === null || v === undefined) return null;
  const a = items(v);
  if (a.length < 3) throw new ProtocolError(`LEADER.CURRENT: expected [candidate, term, ttl], got ${JSON.stringify(v)}`);
  return { candidate: text(a[0]), term: token(a[1], "term"), ttl: Math.max(integer(a[2]), 0) };
}

/** The reply of `SEMAPHORE.INFO`. */
export interface SemaphoreInfo {
  limit: number;
  used: number;
  holders: Holder[];
  waiters: number;
  token: bigint;
}

export function semaphoreInfo(v: unknown): SemaphoreInfo {
  const f = fields(v);
  return {
    limit: Math.max(integer(f.get("limit")), 0),
    used: Math.max(integer(f.get("used")), 0),
    holders: items(f.get("holders")).map(holder),
    waiters: Math.max(integer(f.get("waiters")), 0),
    token: bigOr0(f.get("token")),
  };
}
