/**
 * redis-lease: read-write locks, leader election and counting semaphores on the redis-lease
 * Redis module, for ioredis (`Redis`, `Cluster`, or a Sentinel-configured `Redis`).
 */

export { RwLock, type LockOptions, type WaitOptions } from "./lock.js";
export { LeaderElector, type ElectorOptions } from "./leader.js";
export { LeaderObserver, type ObserverOptions } from "./observer.js";
export { Semaphore, type SemaphoreOptions, type AcquireOptions } from "./semaphore.js";
export { Guard, LockGuard, Leadership, Permit, type GuardOptions } from "./guards.js";
export { Connector, type Client } from "./connector.js";
export {
  LeaseError,
  NotAcquired,
  LeaseLost,
  Fenced,
  Deadlock,
  LockGone,
  LimitMismatch,
  PermitsMismatch,
  TtlRefused,
  ModuleNotLoaded,
  ConnectionFailed,
  Unavailable,
  NotReplicated,
  ProtocolError,
  describeReason,
  type LossReason,
} from "./errors.js";
export { LeaseTiming, MIN_TTL_MS } from "./timing.js";
export { DEFAULT_RETRY, type RetryPolicy } from "./retry.js";
export type { LeaseOptions } from "./spec.js";
export type { LockInfo, LeaderInfo, SemaphoreInfo, Holder } from "./replies.js";
export type { Key, Arg } from "./protocol.js";
