/** Following who leads an election without polling: keyspace notifications on the key. */

import type { Redis } from "ioredis";

import { Connector, type Client } from "./connector.js";
import * as protocol from "./protocol.js";
import * as replies from "./replies.js";
import { DEFAULT_RETRY } from "./retry.js";

/** The `notify-keyspace-events` classes an observer needs that `current` lacks: `K` (keyspace
 * channel), `d` (module events), `g` (del, rename, ...), `x` (expired). */
export function missingNotifyFlags(current: string): string {
  const has = (c: string): boolean => current.includes(c) || ("g$lshzxetd".includes(c) && current.includes("A"));
  return ["K", "d", "g", "x"].filter((c) => !has(c)).join("");
}

function same(a: replies.LeaderInfo | null, b: replies.LeaderInfo | null): boolean {
  if (a === null || b === null) return a === b;
  return a.candidate === b.candidate && a.term === b.term;
}

export interface ObserverOptions {
  /** Add the notification classes it needs to the server's `notify-keyspace-events` (default
   * true; needs CONFIG permission). With false, the server must already send them. */
  configureNotifications?: boolean | undefined;
  commandTimeout?: number | undefined;
}

/**
 * Follows who leads an election: `current` is the leader as last read, `nextChange()` waits
 * for the next change, `for await (const leader of observer)` iterates the changes. Every
 * event on the key (elect, resign, lapse, deletion) makes it read `LEADER.CURRENT` again, and so
 * does every reconnection (events may have been missed meanwhile). Close it with `close()` or
 * `await using`.
 */
export class LeaderObserver implements AsyncDisposable, AsyncIterable<replies.LeaderInfo | null> {
  private currentInfo: replies.LeaderInfo | null = null;
  private version = 0;
  private seen = 0;
  private waiters: (() => void)[] = [];
  private closed = false;
  private sub: Redis | undefined;

  private constructor(
    private readonly connector: Connector,
    readonly key: protocol.Key,
    private readonly commandTimeout: number,
  ) {}

  /** Starts observing `key` (subscribed and read once before it answers). */
  static async start(client: Client | Connector, key: protocol.Key, options: ObserverOptions = {}): Promise<LeaderObserver> {
    const connector = Connector.of(client);
    const obs = new LeaderObserver(connector, key, options.commandTimeout ?? 2000);
    if (options.configureNotifications ?? true) await obs.configure();
    const { conn, channel } = await connector.subscriber(key);
    obs.sub = conn;
    conn.on("message", () => void obs.reread());
    conn.on("ready", () => void obs.reread());
    try {
      await conn.connect();
      await conn.subscribe(channel);
    } catch (e) {
      conn.disconnect();
      throw e;
    }
    obs.currentInfo = await obs.read();
    return obs;
  }

  /** The leader as last read (null: nobody leads). */
  get current(): replies.LeaderInfo | null {
    return this.currentInfo;
  }

  /** Waits for the next change since the last one answered (or the start). Rejects with a
   * `TimeoutError` (a DOMException, as `AbortSignal.timeout`) after `timeout` ms. */
  async nextChange(timeout?: number): Promise<replies.LeaderInfo | null> {
    const seen = this.seen;
    while (this.version === seen) {
      if (this.closed) throw new Error("the observer is closed");
      await new Promise<void>((resolve, reject) => {
        const t = timeout === undefined ? undefined : setTimeout(() => {
          reject(new DOMException(`no change of leader of ${String(this.key)} within ${timeout} ms`, "TimeoutError"));
        }, timeout);
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    this.seen = this.version;
    return this.currentInfo;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<replies.LeaderInfo | null> {
    while (!this.closed) {
      try {
        yield await this.nextChange();
      } catch (e) {
        if (this.closed) return;
        throw e;
      }
    }
  }

  close(): Promise<void> {
    this.closed = true;
    this.sub?.disconnect();
    this.wake();
    return Promise.resolve();
  }

  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  private async configure(): Promise<void> {
    const policy = { ...DEFAULT_RETRY, budget: this.commandTimeout };
    const get = protocol.call(["CONFIG", "GET", "notify-keyspace-events"], this.key, this.commandTimeout);
    const v = await this.connector.run(protocol.queryRetry(get, null, policy));
    const current = Array.isArray(v) && v.length >= 2 ? replies.text(v[1]) : "";
    const missing = missingNotifyFlags(current);
    if (missing !== "") {
      const set = protocol.call(["CONFIG", "SET", "notify-keyspace-events", current + missing], this.key, this.commandTimeout);
      await this.connector.run(protocol.queryRetry(set, null, policy));
    }
  }

  private async read(): Promise<replies.LeaderInfo | null> {
    const c = protocol.call(["LEADER.CURRENT", this.key], this.key, this.commandTimeout);
    return replies.leaderInfo(await this.connector.run(protocol.queryRetry(c, null, DEFAULT_RETRY)));
  }

  private async reread(): Promise<void> {
    if (this.closed) return;
    try {
      const info = await this.read();
      if (!same(this.currentInfo, info)) {
        this.currentInfo = info;
        this.version += 1;
        this.wake();
      }
    } catch {
      // The next event (or reconnection) reads again.
    }
  }
}
