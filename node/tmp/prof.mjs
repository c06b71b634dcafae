import Redis from "ioredis";
import { RwLock } from "../dist/index.js";
const port = 16924;
const N = 8;
const workers = Array.from({ length: N }, () => new Redis({ port }));
const key = "prof" + Date.now();
let t = { acq: 0, rel: 0, n: 0 };
const end = performance.now() + 2000;
await Promise.all(workers.map(async (c) => {
  while (performance.now() < end) {
    const a = performance.now();
    const g = await new RwLock(c, key, { ttl: 10000 }).acquire("write", 5000);
    const b = performance.now();
    await new Promise((r) => setTimeout(r, 2));
    const c0 = performance.now();
    await g.release();
    t.rel += performance.now() - c0; t.acq += b - a; t.n++;
  }
}));
console.log(t.n / 2, "grants/s", "mean acq", t.acq / t.n, "mean rel", t.rel / t.n);
workers.forEach((w) => w.disconnect());
