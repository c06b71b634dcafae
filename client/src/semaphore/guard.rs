//! Permits held on a semaphore ([`SemaphoreGuard`]).

use std::fmt;
use std::time::Instant;

use redis::{Cmd, FromRedisValue};
use tokio::sync::watch;

use crate::error::Result;
use crate::lease::held::Lease;
use crate::lease::status::{LeaseStatus, LossReason};
use crate::semaphore::key::SemaphoreKey;

/// Permits held on a [`Semaphore`](crate::Semaphore): one hold, with its own lease and fencing token. Its
/// watchdog renews the lease (every third of the ttl by default) for as long as the guard
/// lives, exactly as a [`LockGuard`](crate::LockGuard)'s.
///
/// Release it with [`SemaphoreGuard::release`]. Dropping it releases it too, as a best
/// effort: the `SEMAPHORE.RELEASE` is spawned on the current tokio runtime, or, dropped
/// outside any runtime, on the one the client was made on (while it runs; else the lease lapses
/// after its ttl).
///
/// Watch for loss with [`SemaphoreGuard::lost`] or [`SemaphoreGuard::status_watch`]: the
/// guard signals it as soon as a renewal fails definitively, or when the local validity bound
/// passes, which is before the server could hand the permits to anyone else.
///
/// ```no_run
/// # async fn demo(sem: redis_lease_client::Semaphore) -> redis_lease_client::Result<()> {
/// let guard = sem.take(1).await?;
/// tokio::select! {
///     reason = guard.lost() => eprintln!("lost the permits: {reason}"),
///     _ = tokio::time::sleep(std::time::Duration::from_secs(30)) => {}
/// }
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[must_use = "dropping a guard releases it at once"]
pub struct SemaphoreGuard {
    /// The semaphore's key, limit and options.
    sem: SemaphoreKey,
    owner: String,
    permits: u32,
    token: u64,
    lease: Lease,
}

impl fmt::Debug for SemaphoreGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphoreGuard")
            .field("key", &self.sem.key)
            .field("owner", &self.owner)
            .field("permits", &self.permits)
            .field("token", &self.token)
            .field("status", &self.lease.status())
            .finish()
    }
}

impl SemaphoreGuard {
    pub(crate) fn new(
        sem: SemaphoreKey,
        owner: String,
        permits: u32,
        token: u64,
        lease: Lease,
    ) -> SemaphoreGuard {
        SemaphoreGuard {
            sem,
            owner,
            permits,
            token,
            lease,
        }
    }

    /// The fencing token of this hold.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { let t: u64 = g.token(); }
    /// ```
    pub fn token(&self) -> u64 {
        self.token
    }

    /// How many permits this hold takes.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { assert!(g.permits() >= 1); }
    /// ```
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The owner id this hold is registered under.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { println!("{}", g.owner()); }
    /// ```
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The key.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { println!("{}", g.key()); }
    /// ```
    pub fn key(&self) -> &str {
        &self.sem.key
    }

    /// The current lease status (time-checked, as [`LockGuard::status`](crate::LockGuard::status)).
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { if !g.status().is_held() { /* stop */ } }
    /// ```
    pub fn status(&self) -> LeaseStatus {
        self.lease.status()
    }

    /// Whether the lease is certainly still valid right now.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { assert!(g.is_held()); }
    /// ```
    pub fn is_held(&self) -> bool {
        self.status().is_held()
    }

    /// The local instant until which the lease is certainly valid, if held.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { println!("{:?}", g.valid_until()); }
    /// ```
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// `Ok(())` while the lease is held, [`Error::LeaseLost`] after.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) -> redis_lease_client::Result<()> {
    /// g.check()?;
    /// # Ok(()) }
    /// ```
    pub fn check(&self) -> Result<()> {
        self.lease.check()
    }

    /// A watch of the lease status.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) { let rx = g.status_watch(); }
    /// ```
    pub fn status_watch(&self) -> watch::Receiver<LeaseStatus> {
        self.lease.watch()
    }

    /// Resolves when the lease is lost (never, while it is renewed).
    ///
    /// ```no_run
    /// # async fn f(g: &redis_lease_client::SemaphoreGuard) {
    /// let reason = g.lost().await;
    /// # }
    /// ```
    pub fn lost(&self) -> impl std::future::Future<Output = LossReason> + Send + 'static {
        self.lease.lost()
    }

    /// Calls `f` once, from a background task, when the lease is lost (at once if it already
    /// is), with the reason; never if the guard is released or dropped first. Register as
    /// many as needed.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::SemaphoreGuard) {
    /// g.on_lost(|reason| eprintln!("stop writing: the lease was lost ({reason})"));
    /// # }
    /// ```
    pub fn on_lost(&self, f: impl FnOnce(LossReason) + Send + 'static) {
        self.lease.on_lost(&self.sem.client, f);
    }

    /// Runs `cmd` inside Redis only while this hold is live, atomically with the check
    /// (`LEASE.EXEC key token cmd...`), and answers its reply; see
    /// [`LockGuard::exec`](crate::LockGuard::exec). A `FENCED` answer is [`Error::Fenced`] and
    /// marks the lease lost ([`LossReason::Revoked`]). In a Redis Cluster the command's keys
    /// must hash to the semaphore key's slot (a hash tag: `{pool}` and `{pool}:jobs`).
    ///
    /// ```no_run
    /// # async fn f(g: redis_lease_client::SemaphoreGuard) -> redis_lease_client::Result<()> {
    /// let _: () = g.exec(redis::cmd("LPUSH").arg("{pool}:done").arg("job-1")).await?;
    /// # Ok(()) }
    /// ```
    pub async fn exec<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        let (client, retry) = (&self.sem.client, self.sem.opts.retry);
        (self.lease)
            .exec(client, (self.key(), self.token), cmd, retry, true)
            .await
    }

    /// Stops renewing and releases the permits. Answers whether the server still counted them
    /// (false if the lease had already lapsed).
    ///
    /// ```no_run
    /// # async fn f(g: redis_lease_client::SemaphoreGuard) -> redis_lease_client::Result<()> {
    /// let was_held = g.release().await?;
    /// # Ok(()) }
    /// ```
    pub async fn release(mut self) -> Result<bool> {
        self.lease.stop();
        let n = self.sem.release(&self.owner).await?;
        Ok(n > 0)
    }
}

impl Drop for SemaphoreGuard {
    fn drop(&mut self) {
        if !self.lease.stop() {
            return;
        }
        let sem = self.sem.clone();
        let owner = std::mem::take(&mut self.owner);
        self.sem.client.spawn_cleanup(async move {
            let _ = sem.release(&owner).await;
        });
    }
}

crate::guard::impl_guard!(SemaphoreGuard);
