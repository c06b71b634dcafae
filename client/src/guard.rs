//! What every guard is: the [`Guard`] trait that [`LockGuard`](crate::LockGuard) and
//! [`SemaphoreGuard`](crate::SemaphoreGuard) implement, so code that only needs "a held lease
//! with a fencing token" works with either (the `redis-lease` CLI runs CMD under any `Guard`).

use std::future::Future;
use std::time::Instant;

use redis::{Cmd, FromRedisValue};
use tokio::sync::watch;

use crate::error::Result;
use crate::lease::status::{LeaseStatus, LossReason};

/// A held lease: a lock's hold or a semaphore's permits, renewed in the background until it
/// is released or lost.
///
/// ```no_run
/// use redis_lease_client::{Guard, Result};
///
/// /// Runs one step of protected work under any kind of hold.
/// async fn step(g: &impl Guard) -> Result<()> {
///     g.check()?;
///     let _: i64 = g.exec(redis::cmd("INCR").arg("{jobs}:done")).await?;
///     println!("{} holds {} with token {}", g.owner(), g.key(), g.token());
///     Ok(())
/// }
/// ```
pub trait Guard: Send + Sync + Sized {
    /// The fencing token of this hold: pass it to the resources you protect.
    fn token(&self) -> u64;
    /// The key the hold is on.
    fn key(&self) -> &str;
    /// The owner id the hold is under.
    fn owner(&self) -> &str;
    /// The lease status, time-checked (a `Held` whose bound has passed reads as lost).
    fn status(&self) -> LeaseStatus;
    /// A watch of the lease status.
    fn status_watch(&self) -> watch::Receiver<LeaseStatus>;
    /// Resolves when the lease is lost (never, while it is renewed).
    fn lost(&self) -> impl Future<Output = LossReason> + Send + 'static;
    /// Calls `f` once, from a background task, when the lease is lost (at once if it already
    /// is); never if it is released first.
    fn on_lost(&self, f: impl FnOnce(LossReason) + Send + 'static);
    /// Runs `cmd` inside Redis only while this hold is live (`LEASE.EXEC`).
    fn exec<T: FromRedisValue + Send>(&self, cmd: &Cmd) -> impl Future<Output = Result<T>> + Send;
    /// Stops renewing and releases the hold; answers whether the server still counted it.
    fn release(self) -> impl Future<Output = Result<bool>> + Send;

    /// Whether the lease is certainly valid now.
    fn is_held(&self) -> bool {
        self.status().is_held()
    }

    /// The local instant until which the lease is certainly valid, if held.
    fn valid_until(&self) -> Option<Instant> {
        match self.status() {
            LeaseStatus::Held { valid_until } => Some(valid_until),
            _ => None,
        }
    }

    /// `Ok(())` while the lease is held, [`Error::LeaseLost`](crate::Error::LeaseLost) after.
    fn check(&self) -> Result<()>;
}

/// The trait's methods, delegated to a guard type's own.
macro_rules! impl_guard {
    ($t:ty) => {
        impl $crate::guard::Guard for $t {
            fn token(&self) -> u64 {
                <$t>::token(self)
            }
            fn key(&self) -> &str {
                <$t>::key(self)
            }
            fn owner(&self) -> &str {
                <$t>::owner(self)
            }
            fn status(&self) -> $crate::LeaseStatus {
                <$t>::status(self)
            }
            fn status_watch(&self) -> tokio::sync::watch::Receiver<$crate::LeaseStatus> {
                <$t>::status_watch(self)
            }
            fn lost(
                &self,
            ) -> impl std::future::Future<Output = $crate::LossReason> + Send + 'static {
                <$t>::lost(self)
            }
            fn on_lost(&self, f: impl FnOnce($crate::LossReason) + Send + 'static) {
                <$t>::on_lost(self, f)
            }
            fn exec<T: redis::FromRedisValue + Send>(
                &self,
                cmd: &redis::Cmd,
            ) -> impl std::future::Future<Output = $crate::Result<T>> + Send {
                <$t>::exec(self, cmd)
            }
            fn release(self) -> impl std::future::Future<Output = $crate::Result<bool>> + Send {
                <$t>::release(self)
            }
            fn check(&self) -> $crate::Result<()> {
                <$t>::check(self)
            }
        }
    };
}
pub(crate) use impl_guard;
