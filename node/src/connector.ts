/**
 * The connector: this package's own ioredis connections to the deployment behind a caller's
 * client (a `Redis`, a `Cluster` or a Sentinel-configured `Redis`), and the driver that runs
 * the generators of protocol.ts on them.
 *
 * Why connections of its own: a request that waits inside the server (`WAIT ms`) would hold up
 * every command queued behind it on the caller's connection, and ioredis's own reconnection
 * resends unanswered commands, which for a grant request could take a second hold. So short
 * requests go over one pipelined connection per server, made with the caller's options but
 * without ioredis's retries (this package retries itself, adopting what a lost reply may have
 * granted), and each waiting request gets a dedicated connection, kept for reuse afterwards.
 */

import calculateSlot from "cluster-key-slot";
import { Redis, type Cluster, type RedisOptions } from "ioredis";

import { ConnectionFailed } from "./errors.js";
import { Acked, Failed, type Call, type Machine } from "./protocol.js";
import { errorCode, isReplyError } from "./retry.js";

/** The caller's client: an ioredis `Redis` (plain or with `sentinels`) or `Cluster`. */
export type Client = Redis | Cluster;

/** How many idle dedicated connections are kept per server. */
const MAX_IDLE = 8;

interface Route {
  /** host:port (or the socket path, or "sentinel master NAME"): in every connection error. */
  address: string;
  options: RedisOptions;
}

function isCluster(c: Client): c is Cluster {
  return (c as { isCluster?: boolean }).isCluster === true;
}

/** The system's word for a connection error code. */
const CAUSES: Record<string, string> = {
  ECONNREFUSED: "Connection refused",
  ECONNRESET: "Connection reset by peer",
  ETIMEDOUT: "Connection timed out",
  EHOSTUNREACH: "No route to host",
  ENETUNREACH: "Network is unreachable",
  ENOTFOUND: "Host not found",
  EPIPE: "Broken pipe",
  ENOENT: "No such socket file",
};

function codeOf(e: unknown): string | undefined {
  const c = (e as { code?: unknown } | null)?.code;
  return typeof c === "string" ? c : undefined;
}

function connectionError(address: string, e: unknown, sent: boolean): ConnectionFailed {
  const code = codeOf(e);
  const msg = e instanceof Error ? e.message : String(e);
  const cause = code !== undefined && CAUSES[code] !== undefined ? `${CAUSES[code]} (${msg})` : msg;
  return new ConnectionFailed(address, sent ? `connection lost before the reply: ${cause}` : `cannot connect: ${cause}`, code, sent, e);
}

const ABORTED = Symbol("aborted");

function abortable<T>(p: Promise<T>, signal: AbortSignal | undefined, onAbort: () => void): Promise<T | typeof ABORTED> {
  if (signal === undefined) return p;
  if (signal.aborted) {
    p.catch(() => undefined);
    onAbort();
    return Promise.resolve(ABORTED);
  }
  return new Promise((resolve, reject) => {
    const abort = (): void => {
      onAbort();
      resolve(ABORTED);
    };
    signal.addEventListener("abort", abort, { once: true });
    p.then(
      (v) => {
        signal.removeEventListener("abort", abort);
        resolve(v);
      },
      (e: unknown) => {
        signal.removeEventListener("abort", abort);
        reject(e);
      },
    );
  });
}

/** Resolves after `ms` or when `signal` aborts (answers whether it aborted). */
export function pause(ms: number, signal?: AbortSignal): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve(signal?.aborted ?? false);
    };
    const t = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
  });
}

class Timeout extends Error {}

function within<T>(p: Promise<T>, ms: number | null): Promise<T> {
  if (ms === null) return p;
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => { reject(new Timeout(`no reply within ${Math.round(ms)} ms`)); }, Math.max(ms, 1));
    p.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      (e: unknown) => {
        clearTimeout(t);
        reject(e);
      },
    );
  });
}

const connectors = new WeakMap<object, Connector>();

const inFlight = new WeakMap<Redis, number>();
const lastError = new WeakMap<Redis, unknown>();

/** This package's sockets keep the process alive only while a request of theirs is in flight:
 * an idle connection (or one kept for reuse) never stops a script from exiting. */
function busy(conn: Redis, delta: number): void {
  const n = (inFlight.get(conn) ?? 0) + delta;
  inFlight.set(conn, n);
  const s = conn.stream as { ref?: () => void; unref?: () => void } | undefined;
  if (n > 0) s?.ref?.();
  else s?.unref?.();
}

/** Connections of this package's own to the servers behind one client; see the module doc. */
export class Connector {
  private readonly shared = new Map<string, Promise<Redis>>();
  private readonly idle = new Map<string, Redis[]>();
  private readonly moved = new Map<number, string>();
  private readonly open = new Set<Redis>();
  /** Dedicated connections with a request in flight, per address. */
  private readonly waiting = new Map<string, Set<Redis>>();
  private readonly watchers: Redis[] = [];
  /** The route of a client that is not a cluster (made once). */
  private single: Route | undefined;
  private closed = false;

  constructor(
    readonly client: Client,
    readonly commandTimeout = 2000,
  ) {}

  /** The shared connector of `client` (kept with it, collected with it). */
  static of(client: Client | Connector): Connector {
    if (client instanceof Connector) return client;
    let c = connectors.get(client);
    if (c === undefined) {
      const made = new Connector(client);
      connectors.set(client, made);
      // The caller closing its client closes ours too.
      client.on("end", () => void made.close());
      c = made;
    }
    return c;
  }

  /** Closes every connection of this connector (a later request opens new ones). */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.open, ...this.watchers];
    this.open.clear();
    this.watchers.length = 0;
    this.single = undefined;
    this.waiting.clear();
    this.shared.clear();
    this.idle.clear();
    for (const c of all) c.disconnect();
    this.closed = false;
    await Promise.resolve();
  }

  private tuned(base: RedisOptions): RedisOptions {
    return {
      ...base,
      lazyConnect: true,
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
      sentinelRetryStrategy: () => null,
      reconnectOnError: () => false,
      autoResendUnfulfilledCommands: false,
      autoResubscribe: false,
      enableReadyCheck: false,
      enableAutoPipelining: false,
      stringNumbers: true,
      keyPrefix: "",
      connectTimeout: this.commandTimeout,
      commandTimeout: undefined,
      // Keepalive probes so that a request parked without a limit (WAIT 0) notices a peer that
      // vanished without closing the connection.
      keepAlive: 10_000,
    };
  }

  /**
   * With Sentinel: follows `+switch-master` on every sentinel, and on a failover of our master
   * drops every connection to the old one, in-flight waits included. Otherwise a connection
   * made before the failover goes on renewing on the demoted master until the sentinels
   * reconfigure it, while the hold lapses on the new master and is granted to someone else.
   */
  private watchSentinels(o: RedisOptions, address: string): void {
    if (this.watchers.length > 0 || !o.sentinels) return;
    const name = o.name ?? "mymaster";
    for (const s of o.sentinels) {
      const w = new Redis({
        host: s.host ?? "localhost",
        port: s.port ?? 26379,
        username: o.sentinelUsername,
        password: o.sentinelPassword,
        tls: o.sentinelTLS,
        lazyConnect: false,
        enableReadyCheck: false,
        maxRetriesPerRequest: null,
        retryStrategy: (n: number) => Math.min(100 * n, 2000),
      });
      w.on("error", () => undefined);
      w.on("ready", () => (w.stream as { unref?: () => void } | undefined)?.unref?.());
      w.on("message", (_channel: string, msg: string) => {
        if (msg.split(" ")[0] === name) this.forget(address, true);
      });
      void w.subscribe("+switch-master").catch(() => undefined);
      this.watchers.push(w);
    }
  }

  /** Where a call goes: the node of its key's slot in a cluster, else the client's server. */
  private async route(key: Call["route"], ask: string | null): Promise<Route> {
    const c = this.client;
    if (!isCluster(c)) {
      if (this.single === undefined) {
        const o = c.options;
        const address = o.sentinels ? `sentinel master ${o.name ?? "mymaster"}` : o.path ? o.path : `${o.host ?? "localhost"}:${o.port ?? 6379}`;
        if (o.sentinels) this.watchSentinels(o, address);
        this.single = { address, options: this.tuned(o) };
      }
      return this.single;
    }
    let node = ask;
    if (node === null) {
      const slot = calculateSlot(key);
      node = this.moved.get(slot) ?? null;
      if (node === null) {
        if (c.slots[slot] === undefined || c.slots[slot]?.length === 0) await this.clusterReady(c);
        node = c.slots[slot]?.[0] ?? null;
      }
    }
    if (node === null) throw new ConnectionFailed("redis cluster", "no node serves the key's slot now", undefined, false);
    const i = node.lastIndexOf(":");
    const host = node.slice(0, i);
    const port = Number(node.slice(i + 1));
    return { address: node, options: this.tuned({ ...c.options.redisOptions, host, port }) };
  }

  private async clusterReady(c: Cluster): Promise<void> {
    if (c.status === "wait") {
      await within(c.connect(), this.commandTimeout).catch(() => undefined);
      return;
    }
    if (c.status === "ready") {
      c.refreshSlotsCache();
      await pause(50);
      return;
    }
    await within(
      new Promise<void>((resolve) => c.once("ready", () => { resolve(); })),
      this.commandTimeout,
    ).catch(() => undefined);
  }

  /**
   * A subscriber to `key`'s keyspace channel, on the server (cluster node) that holds the key:
   * a connection of its own that reconnects and resubscribes by itself, its socket never
   * keeping the process alive. Answers it with the channel.
   */
  async subscriber(key: Call["route"]): Promise<{ conn: Redis; channel: string; address: string }> {
    const r = await this.route(key, null);
    const conn = new Redis({
      ...r.options,
      lazyConnect: true,
      autoResubscribe: true,
      enableOfflineQueue: true,
      maxRetriesPerRequest: null,
      retryStrategy: (n: number) => Math.min(50 * n, 1000),
      stringNumbers: false,
    });
    conn.on("error", () => undefined);
    conn.on("ready", () => (conn.stream as { unref?: () => void } | undefined)?.unref?.());
    const db = r.options.db ?? 0;
    return { conn, channel: `__keyspace@${db}__:${key.toString()}`, address: r.address };
  }

  private fresh(r: Route): Redis {
    const conn = new Redis(r.options);
    // Reported through the calls that fail; kept because ioredis rejects a failed connect with
    // "Connection is closed." rather than the socket's error (ECONNREFUSED, ...).
    conn.on("error", (e: unknown) => lastError.set(conn, e));
    this.open.add(conn);
    conn.once("end", () => this.open.delete(conn));
    return conn;
  }

  private async connect(r: Route, conn: Redis, limit: number | null): Promise<void> {
    const bound = limit === null ? this.commandTimeout : Math.min(this.commandTimeout, Math.max(limit, 1));
    try {
      await within(conn.connect(), bound);
      busy(conn, 0);
    } catch (e) {
      conn.disconnect();
      e = lastError.get(conn) ?? e;
      // The server refused the handshake (WRONGPASS, NOPERM on SELECT, ...): asking again
      // cannot fix it.
      if (isReplyError(e)) throw e;
      throw connectionError(r.address, e instanceof Timeout ? Object.assign(new Error(e.message), { code: "ETIMEDOUT" }) : e, false);
    }
  }

  private sharedFor(r: Route, limit: number | null): Promise<Redis> {
    let p = this.shared.get(r.address);
    if (p === undefined) {
      const conn = this.fresh(r);
      p = this.connect(r, conn, limit).then(() => conn);
      const entry = p;
      this.shared.set(r.address, entry);
      entry.catch(() => {
        if (this.shared.get(r.address) === entry) this.shared.delete(r.address);
      });
      conn.once("end", () => {
        if (this.shared.get(r.address) === entry) this.shared.delete(r.address);
      });
    }
    return p;
  }

  private async dedicatedFor(r: Route, limit: number | null): Promise<Redis> {
    const idle = this.idle.get(r.address);
    while (idle !== undefined && idle.length > 0) {
      const c = idle.pop();
      if (c !== undefined && c.status === "ready") return c;
    }
    const conn = this.fresh(r);
    await this.connect(r, conn, limit);
    return conn;
  }

  private putBack(r: Route, conn: Redis): void {
    let idle = this.idle.get(r.address);
    if (idle === undefined) {
      idle = [];
      this.idle.set(r.address, idle);
    }
    if (idle.length < MAX_IDLE && conn.status === "ready" && !this.closed) idle.push(conn);
    else conn.disconnect();
  }

  /** Drops every connection to `address` (a demoted master, a dead server): the next request
   * connects (and with Sentinel, looks the master up) anew. */
  private forget(address: string, inFlightToo = false): void {
    const s = this.shared.get(address);
    this.shared.delete(address);
    void s?.then((c) => { c.disconnect(); }).catch(() => undefined);
    for (const c of this.idle.get(address) ?? []) c.disconnect();
    this.idle.delete(address);
    if (inFlightToo) {
      for (const c of this.waiting.get(address) ?? []) c.disconnect();
      this.waiting.delete(address);
    }
  }

  /** Sends one request; answers its reply (an {@link Acked} with `acks`), or a {@link Failed}. */
  async perform(call: Call, signal?: AbortSignal): Promise<unknown> {
    let ask: string | null = null;
    let r: unknown = undefined;
    for (let i = 0; i < 5; i++) {
      let route: Route;
      try {
        route = await this.route(call.route, ask);
      } catch (e) {
        if (isCluster(this.client)) this.client.refreshSlotsCache();
        return new Failed(e instanceof ConnectionFailed ? e : connectionError("redis cluster", e, false), false, "redis cluster");
      }
      r = await this.once(route, call, ask !== null, signal);
      ask = null;
      if (r instanceof Failed && isCluster(this.client) && isReplyError(r.error)) {
        const code = errorCode(r.error);
        const parts = r.error.message.split(" ");
        if ((code === "MOVED" || code === "ASK") && parts.length >= 3) {
          const [, slot, addr] = parts;
          if (code === "ASK") ask = addr ?? null;
          else {
            this.moved.set(Number(slot), addr ?? "");
            this.client.refreshSlotsCache();
          }
          continue;
        }
      }
      if (r instanceof Failed && isCluster(this.client) && !isReplyError(r.error)) {
        this.moved.clear();
        this.client.refreshSlotsCache();
      }
      return r;
    }
    return r;
  }

  private async once(route: Route, call: Call, asking: boolean, signal: AbortSignal | undefined): Promise<unknown> {
    const start = performance.now();
    const dedicated = call.dedicated || asking;
    let conn: Redis;
    try {
      conn = dedicated ? await this.dedicatedFor(route, call.limit) : await this.sharedFor(route, call.limit);
    } catch (e) {
      if (isReplyError(e)) return new Failed(e, false, route.address);
      return new Failed(e instanceof ConnectionFailed ? e : connectionError(route.address, e, false), false, route.address);
    }
    const address = conn.stream?.remoteAddress !== undefined && this.isSentinel() ? `${route.address} (${conn.stream.remoteAddress}:${conn.stream.remotePort})` : route.address;
    const left = call.limit === null ? null : Math.max(call.limit - (performance.now() - start), 1);
    let p: Promise<unknown>;
    if (call.acks !== undefined || asking) {
      const pipe = conn.pipeline();
      if (asking) pipe.call("ASKING");
      const [cmd, ...args] = call.args;
      pipe.call(String(cmd), args);
      if (call.follow !== undefined) {
        const [f, ...fargs] = call.follow;
        pipe.call(String(f), fargs);
      }
      if (call.acks !== undefined) pipe.call("WAIT", [call.acks.replicas, call.acks.timeout]);
      const acks = call.acks;
      const skip = asking ? 1 : 0;
      p = pipe.exec().then((res) => {
        if (res === null) throw new Error("Connection is closed.");
        for (const [err] of res) if (err !== null && err !== undefined && errorCode(err) === "ASKING") throw err;
        const first = res[skip];
        if (first?.[0]) throw first[0];
        if (acks === undefined) return first?.[1];
        const last = res[res.length - 1];
        if (last?.[0]) throw last[0];
        return new Acked(first?.[1] ?? null, Number(last?.[1] ?? 0));
      });
    } else {
      const [cmd, ...args] = call.args;
      p = conn.call(String(cmd), args);
    }
    busy(conn, 1);
    let inFlight = this.waiting.get(route.address);
    if (dedicated) {
      if (inFlight === undefined) this.waiting.set(route.address, (inFlight = new Set()));
      inFlight.add(conn);
    }
    try {
      // An abort drops a dedicated call by closing its connection (the server drops the
      // waiter); a short call on the shared connection is left to finish.
      const v = await abortable(within(p, left), signal, () => {
        if (dedicated) conn.disconnect();
      });
      if (v === ABORTED) return ABORTED;
      if (dedicated) this.putBack(route, conn);
      return v;
    } catch (e) {
      if (isReplyError(e)) {
        if (dedicated) this.putBack(route, conn);
        if (errorCode(e) === "READONLY" || errorCode(e) === "UNBLOCKED") this.forget(route.address);
        return new Failed(e, true, address);
      }
      // A connection that timed out may still have the request parked in the server: closing
      // it makes the server drop the waiter.
      conn.disconnect();
      this.forget(route.address);
      const err = e instanceof Timeout ? Object.assign(new Error(e.message), { code: "ETIMEDOUT" }) : e;
      const stillUnsent = e instanceof Error && e.message.startsWith("Stream isn't writeable");
      // ioredis closes a connection whose handshake the server refused (WRONGPASS, ...) and
      // reports that only as an error event: that refusal is the answer.
      const refusal = lastError.get(conn);
      if (stillUnsent && isReplyError(refusal)) return new Failed(refusal, false, address);
      return new Failed(connectionError(address, err, !stillUnsent), !stillUnsent, address);
    } finally {
      busy(conn, -1);
      inFlight?.delete(conn);
    }
  }

  private isSentinel(): boolean {
    return !isCluster(this.client) && this.client.options.sentinels !== undefined && this.client.options.sentinels !== null;
  }

  /**
   * Runs a generator of protocol.ts to its end. With `signal`: an abort ends it with the
   * signal's reason (in-flight waits are dropped by closing their connection).
   */
  async run<T>(machine: Machine<T>, signal?: AbortSignal): Promise<T> {
    let next = machine.next();
    try {
      for (;;) {
        if (next.done === true) return next.value;
        if (signal?.aborted) throw aborted(signal);
        const op = next.value;
        let value: unknown = null;
        if (op.op === "sleep") {
          if (await pause(op.ms, signal)) throw aborted(signal);
        } else {
          value = await this.perform(op, signal);
          if (value === ABORTED) throw aborted(signal);
        }
        next = machine.next(value);
      }
    } finally {
      machine.return(undefined as T);
    }
  }
}

function aborted(signal: AbortSignal | undefined): unknown {
  return signal?.reason ?? new Error("aborted");
}
