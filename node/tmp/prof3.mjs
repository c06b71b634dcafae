import Redis from "ioredis";
import { RwLock } from "../dist/index.js";
const c = new Redis({ port: 16924 });
const lock = new RwLock(c, "p3", { ttl: 10000 });
for (let i = 0; i < 300; i++) { const g = await lock.acquire("write", 5000); await g.release(); }
const cpu0 = process.cpuUsage(); const N = 3000;
for (let i = 0; i < N; i++) { const g = await lock.acquire("write", 5000); await g.release(); }
const u = process.cpuUsage(cpu0); console.log(((u.user + u.system) / N).toFixed(0), "us/cycle");
c.disconnect();
