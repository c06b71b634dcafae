// The example, as the README shows it; test/pack.sh compiles it with the installed
// tarball's types and runs it against a server with the module.
import Redis from "ioredis";
import { RwLock, LeaderElector, Semaphore, LeaseLost, NotAcquired } from "redis-lease";

const redis = new Redis(Number(process.env.PORT ?? 6379));
const lock = new RwLock(redis, "orders", { ttl: 5000 }); // ms, as setTimeout
{
  await using guard = await lock.write({ timeout: 10000 }); // waits inside the server
  guard.token; // fencing token (bigint)
  guard.signal; // AbortSignal, aborted with a LeaseLost reason when the lease is lost
  await guard.exec("SET", "orders:status", "shipped"); // LEASE.EXEC: fenced by Redis itself
  console.log("token", guard.token, "signal aborted", guard.signal.aborted);
} // released here
const maybe = await lock.tryWrite(); // guard or null; also read() / tryRead()
console.log("tryWrite after the scope", maybe === null ? null : "guard");
await maybe?.release();
const leadership = await new LeaderElector(redis, "jobs", { ttl: 3000 }).campaign({ timeout: 30000 });
console.log("term", leadership.term, leadership.signal.aborted);
await leadership.resign();
const permit = await new Semaphore(redis, "api", { limit: 3, ttl: 5000 }).acquire({ permits: 2 });
await permit.release(); // a second release is harmless; also tryAcquire()
console.log("second release", await permit.release());
console.log("status", await redis.get("orders:status"), typeof LeaseLost, typeof NotAcquired);
await redis.quit();
