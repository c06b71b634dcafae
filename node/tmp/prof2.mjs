import Redis from "ioredis";
import { randomUUID } from "node:crypto";
import { RwLock } from "../dist/index.js";
const port = 16924, N = 4, MS = 2000;
async function run(kind) {
  const key = kind + Date.now();
  let n = 0;
  const end = performance.now() + MS; const cpu0 = process.cpuUsage();
  const ws = Array.from({ length: N }, () => ({ c: new Redis({ port }), d: new Redis({ port }) }));
  await Promise.all(ws.map(async (w) => {
    const lock = new RwLock(w.c, key, { ttl: 10000 });
    while (performance.now() < end) {
      if (kind === "client") { const g = await lock.acquire("write", 5000); await g.release(); }
      else { const o = randomUUID(); await w.d.call("RWLOCK.WLOCK", key, o, 10000, "WAIT", 5000); await w.c.call("RWLOCK.UNLOCK", key, o); }
      n++;
    }
  }));
  ws.forEach((w) => { w.c.disconnect(); w.d.disconnect(); });
  const c = process.cpuUsage(cpu0); return `${n / (MS / 1000)}/s ${((c.user + c.system) / n).toFixed(0)}us cpu/grant`;
}
console.log("raw", await run("raw"), "client", await run("client"), "raw", await run("raw"), "client", await run("client"));
