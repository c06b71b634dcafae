// Real redis-server processes with the redis-lease module, on free loopback ports, each in its
// own temporary directory, stopped by pid (the Node twin of testkit/ and python/tests/servers.py).
// REDIS_SERVER names the server binary (default redis-server), REDIS_LEASE_MODULE the module
// (default target/release/libredis_lease.so of the repository, or of CARGO_TARGET_DIR).
import { spawn, execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, readFileSync, writeFileSync, existsSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

export function modulePath() {
  if (process.env.REDIS_LEASE_MODULE) return process.env.REDIS_LEASE_MODULE;
  const target = process.env.CARGO_TARGET_DIR ? path.resolve(ROOT, process.env.CARGO_TARGET_DIR) : path.join(ROOT, "target");
  return path.join(target, "release", "libredis_lease.so");
}

export const serverBinary = () => process.env.REDIS_SERVER || "redis-server";

/** A free TCP port on 127.0.0.1 (the OS picks it; a race is possible, so starts retry). */
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Polls `ok` (sync or async) until it holds; fails after `limit` ms. */
export async function until(limit, what, ok, every = 50) {
  const end = performance.now() + limit;
  for (;;) {
    try {
      if (await ok()) return;
    } catch {
      // not yet
    }
    if (performance.now() > end) throw new Error(`timed out after ${limit} ms waiting for ${what}`);
    await sleep(every);
  }
}

function encode(args) {
  let out = `*${args.length}\r\n`;
  for (const a of args) {
    const b = Buffer.from(String(a));
    out += `$${b.length}\r\n${b.toString("binary")}\r\n`;
  }
  return Buffer.from(out, "binary");
}

/** Parses one RESP2 reply from `buf` at `i`: [value, next] or null if incomplete. Errors come
 * back as Error objects (not thrown). */
export function parse(buf, i = 0) {
  if (i >= buf.length) return null;
  const eol = buf.indexOf("\r\n", i);
  if (eol < 0) return null;
  const t = String.fromCharCode(buf[i]);
  const line = buf.toString("utf8", i + 1, eol);
  const next = eol + 2;
  if (t === "+") return [line, next];
  if (t === "-") return [new Error(line), next];
  if (t === ":") return [Number(line), next];
  if (t === "$") {
    const n = Number(line);
    if (n < 0) return [null, next];
    if (buf.length < next + n + 2) return null;
    return [buf.toString("utf8", next, next + n), next + n + 2];
  }
  if (t === "*") {
    const n = Number(line);
    if (n < 0) return [null, next];
    const out = [];
    let j = next;
    for (let k = 0; k < n; k++) {
      const r = parse(buf, j);
      if (r === null) return null;
      out.push(r[0]);
      j = r[1];
    }
    return [out, j];
  }
  throw new Error(`bad RESP type ${t}`);
}

/** One command on a fresh raw socket (no client retries that could hide anything). */
export function raw(port, ...args) {
  return new Promise((resolve, reject) => {
    const s = net.connect(port, "127.0.0.1");
    let buf = Buffer.alloc(0);
    const t = setTimeout(() => {
      s.destroy();
      reject(new Error(`no reply from ${port} to ${args.join(" ")}`));
    }, 10_000);
    s.on("error", (e) => {
      clearTimeout(t);
      reject(e);
    });
    s.on("data", (d) => {
      buf = Buffer.concat([buf, d]);
      const r = parse(buf);
      if (r !== null) {
        clearTimeout(t);
        s.destroy();
        resolve(r[0]);
      }
    });
    s.write(encode(args));
  });
}

/** A running redis-server with the module (`module: false`: without it). */
export class Server {
  static async start({ args = [], module = true, moduleArgs = [], port } = {}) {
    const s = new Server(args, module, moduleArgs);
    let last;
    for (let i = 0; i < 5; i++) {
      s.port = port ?? (await freePort());
      try {
        await s.spawn();
        return s;
      } catch (e) {
        last = e;
        if (port !== undefined) break;
      }
    }
    rmSync(s.dir, { recursive: true, force: true });
    throw new Error(`redis-server did not start: ${last}`);
  }

  constructor(args, module, moduleArgs) {
    this.args = args;
    this.module = module;
    this.moduleArgs = moduleArgs;
    this.dir = mkdtempSync(path.join(os.tmpdir(), "redis-lease-node-"));
    this.proc = null;
    this.port = 0;
  }

  async spawn() {
    const cmd = ["--port", String(this.port), "--bind", "127.0.0.1", "--dir", this.dir, "--logfile", "redis.log",
      "--save", "", "--daemonize", "no"];
    if (this.module) {
      if (!existsSync(modulePath())) throw new Error(`module ${modulePath()} not built: run make first`);
      cmd.push("--loadmodule", modulePath(), ...this.moduleArgs);
    }
    cmd.push(...this.args);
    const proc = spawn(serverBinary(), cmd, { stdio: "ignore" });
    this.proc = proc;
    let exited = false;
    proc.once("exit", () => {
      exited = true;
    });
    const end = performance.now() + 20_000;
    for (;;) {
      if (exited) {
        this.proc = null;
        throw new Error(`redis-server exited; log:\n${this.log()}`);
      }
      try {
        const pong = await raw(this.port, "PING");
        if (pong === "PONG" || (pong instanceof Error && pong.message.startsWith("NOAUTH"))) return;
      } catch {
        // not up yet
      }
      if (performance.now() > end) {
        this.kill9();
        throw new Error(`redis-server on ${this.port} did not answer; log:\n${this.log()}`);
      }
      await sleep(30);
    }
  }

  log() {
    try {
      return readFileSync(path.join(this.dir, "redis.log"), "utf8").slice(-3000);
    } catch {
      return "";
    }
  }

  raw(...args) {
    return raw(this.port, ...args);
  }

  kill9() {
    if (this.proc) {
      this.proc.kill("SIGKILL");
      this.proc = null;
    }
  }

  freeze() {
    this.proc.kill("SIGSTOP");
  }

  thaw() {
    this.proc.kill("SIGCONT");
  }

  /** Kills it (SIGKILL) and starts it again on the same port and directory. */
  async restart() {
    const p = this.proc;
    this.kill9();
    if (p && p.exitCode === null) await new Promise((r) => p.once("exit", r));
    await this.spawn();
  }

  async stop() {
    const p = this.proc;
    this.proc = null;
    if (p) {
      p.kill("SIGCONT");
      p.kill("SIGKILL");
      if (p.exitCode === null && p.signalCode === null) await new Promise((r) => p.once("exit", r));
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

function clusterNodes(text) {
  return text
    .trim()
    .split("\n")
    .map((l) => {
      const f = l.split(" ");
      const [host, rest] = f[1].split(":");
      return {
        id: f[0],
        host,
        port: Number(rest.split("@")[0]),
        master: f[2].includes("master"),
        masterId: f[3],
        slots: f.slice(8).filter((s) => /^\d/.test(s)).map((s) => s.split("-").map(Number)),
      };
    });
}

/** 3 masters and 3 replicas, the module on every node, joined by redis-cli --cluster create. */
export class Cluster {
  static async start() {
    const c = new Cluster();
    const args = ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000", "--appendonly", "no"];
    try {
      c.nodes = await Promise.all([0, 1, 2, 3, 4, 5].map(() => Server.start({ args })));
      execFileSync("redis-cli", ["--cluster", "create", ...c.nodes.map((n) => `127.0.0.1:${n.port}`), "--cluster-replicas", "1", "--cluster-yes"], {
        stdio: "ignore",
        timeout: 60_000,
      });
      for (const n of c.nodes) {
        await until(30_000, "cluster_state:ok", async () => String(await n.raw("CLUSTER", "INFO")).includes("cluster_state:ok"), 100);
        await until(30_000, "every node to agree on roles", async () => {
          const ns = clusterNodes(await n.raw("CLUSTER", "NODES"));
          return ns.filter((x) => x.master && x.slots.length > 0).length === 3 && ns.filter((x) => !x.master).length === 3;
        }, 100);
      }
    } catch (e) {
      await c.stop();
      throw e;
    }
    return c;
  }

  constructor() {
    this.nodes = [];
  }

  async ownerOf(key) {
    const port = this.nodes[0].port;
    const slot = await raw(port, "CLUSTER", "KEYSLOT", key);
    const ns = clusterNodes(await raw(port, "CLUSTER", "NODES"));
    const m = ns.find((n) => n.master && n.slots.some(([lo, hi = lo]) => lo <= slot && slot <= hi));
    if (!m) throw new Error(`no master serves slot ${slot}`);
    return m;
  }

  /** Fails the master of `key` over to its replica (which has every write) and waits until
   * the cluster agrees. Answers the new master. */
  async failOver(key) {
    const master = await this.ownerOf(key);
    if ((await raw(master.port, "WAIT", 1, 5000)) !== 1) throw new Error("the replica lacks writes");
    const replica = clusterNodes(await raw(master.port, "CLUSTER", "NODES")).find((n) => !n.master && n.masterId === master.id);
    await raw(replica.port, "CLUSTER", "FAILOVER");
    await until(30_000, "the replica to take over", async () => String(await raw(replica.port, "INFO", "replication")).includes("role:master"), 100);
    await until(30_000, "the cluster to agree", async () => (await this.ownerOf(key)).id === replica.id, 100);
    return replica;
  }

  async stop() {
    await Promise.all(this.nodes.map((n) => n.stop()));
  }
}

/** One Redis Sentinel monitoring `masterPort` as mymaster (quorum 1); ping period 500 ms,
 * below down-after (testkit::sentinel says why). */
export class Sentinel {
  static async start(masterPort, name = "mymaster") {
    const s = new Sentinel(name);
    let last;
    for (let i = 0; i < 5; i++) {
      s.port = await freePort();
      const conf = path.join(s.dir, "sentinel.conf");
      writeFileSync(
        conf,
        `port ${s.port}\nbind 127.0.0.1\ndir ${s.dir}\nlogfile sentinel.log\n` +
          `sentinel monitor ${name} 127.0.0.1 ${masterPort} 1\n` +
          `sentinel down-after-milliseconds ${name} 2000\nsentinel failover-timeout ${name} 10000\n`,
      );
      s.proc = spawn(serverBinary(), [conf, "--sentinel"], { stdio: "ignore" });
      try {
        await until(20_000, "sentinel to answer", async () => (await s.masterPort()) === masterPort);
        await raw(s.port, "SENTINEL", "DEBUG", "ping-period", 500).catch(() => undefined);
        return s;
      } catch (e) {
        last = e;
        s.proc.kill("SIGKILL");
      }
    }
    throw new Error(`sentinel did not start: ${last}`);
  }

  constructor(name) {
    this.name = name;
    this.dir = mkdtempSync(path.join(os.tmpdir(), "redis-lease-node-sentinel-"));
  }

  async masterPort() {
    const a = await raw(this.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", this.name);
    return Array.isArray(a) && a.length === 2 ? Number(a[1]) : null;
  }

  async replicasKnown() {
    const r = await raw(this.port, "SENTINEL", "REPLICAS", this.name);
    return Array.isArray(r) ? r.length : 0;
  }

  async stop() {
    const p = this.proc;
    this.proc = null;
    if (p) {
      p.kill("SIGKILL");
      if (p.exitCode === null && p.signalCode === null) await new Promise((r) => p.once("exit", r));
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
