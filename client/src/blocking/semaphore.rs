//! Blocking semaphores.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue};
use tokio::runtime::Runtime;

use crate::acquire::Wait;
use crate::error::Result;
use crate::lease::status::{LeaseStatus, LossReason};
use crate::lock::options::LockOptions;
use crate::semaphore::info::SemaphoreInfo;

/// Blocking [`crate::Semaphore`].
///
/// ```no_run
/// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
/// let sem = c.semaphore("api", 5);
/// if let Some(g) = sem.try_acquire(1)? { g.release()?; }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    pub(super) rt: Arc<Runtime>,
    pub(super) inner: crate::semaphore::Semaphore,
}

impl Semaphore {
    /// See [`crate::Semaphore::with_ttl`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
    /// let sem = c.semaphore("k", 3).with_ttl(std::time::Duration::from_secs(3))?;
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<Semaphore> {
        self.inner = self.inner.with_ttl(ttl)?;
        Ok(self)
    }

    /// See [`crate::Semaphore::with_replicas`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let sem = c.semaphore("k", 3).with_replicas(1); }
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> Semaphore {
        self.inner = self.inner.with_replicas(replicas);
        self
    }

    /// See [`crate::Semaphore::with_options`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let sem = c.semaphore("k", 3).with_options(Default::default()); }
    /// ```
    pub fn with_options(mut self, opts: LockOptions) -> Semaphore {
        self.inner = self.inner.with_options(opts);
        self
    }

    /// See [`crate::Semaphore::with_owner`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let sem = c.semaphore("k", 3).with_owner("me"); }
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> Semaphore {
        self.inner = self.inner.with_owner(owner);
        self
    }

    fn wrap(&self, g: crate::semaphore::guard::SemaphoreGuard) -> SemaphoreGuard {
        SemaphoreGuard {
            rt: self.rt.clone(),
            inner: Some(g),
        }
    }

    /// Takes `permits` permits, waiting as long as it takes.
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = s.acquire(1)?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, permits: u32) -> Result<SemaphoreGuard> {
        let g = self.rt.block_on(self.inner.acquire(permits))?;
        Ok(self.wrap(g))
    }

    /// Takes `permits` permits if they are free now.
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = s.try_acquire(1)?;
    /// # Ok(()) }
    /// ```
    pub fn try_acquire(&self, permits: u32) -> Result<Option<SemaphoreGuard>> {
        self.acquire_with(permits, Wait::No)
    }

    /// Takes `permits` permits, waiting at most `wait`.
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = s.acquire_timeout(1, std::time::Duration::from_secs(1))?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_timeout(&self, permits: u32, wait: Duration) -> Result<Option<SemaphoreGuard>> {
        self.acquire_with(permits, Wait::For(wait))
    }

    /// See [`crate::Semaphore::acquire_with`].
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = s.acquire_with(1, redis_lease_client::Wait::No)?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_with(&self, permits: u32, wait: Wait) -> Result<Option<SemaphoreGuard>> {
        let g = self.rt.block_on(self.inner.acquire_with(permits, wait))?;
        Ok(g.map(|g| self.wrap(g)))
    }

    /// See [`crate::Semaphore::info`].
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// println!("{:?}", s.info()?);
    /// # Ok(()) }
    /// ```
    pub fn info(&self) -> Result<SemaphoreInfo> {
        self.rt.block_on(self.inner.info())
    }
}

/// Blocking [`crate::SemaphoreGuard`]. Dropping it releases the permits (blocking for the
/// round trip), unless it is dropped inside an async context, where the release is spawned.
///
/// ```no_run
/// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
/// let g = s.acquire(2)?;
/// g.check()?;
/// g.release()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct SemaphoreGuard {
    pub(super) rt: Arc<Runtime>,
    pub(super) inner: Option<crate::semaphore::guard::SemaphoreGuard>,
}

impl SemaphoreGuard {
    fn g(&self) -> &crate::semaphore::guard::SemaphoreGuard {
        self.inner.as_ref().expect("guard present until release")
    }

    /// The fencing token.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) { let t = g.token(); }
    /// ```
    pub fn token(&self) -> u64 {
        self.g().token()
    }

    /// The owner id.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) { println!("{}", g.owner()); }
    /// ```
    pub fn owner(&self) -> &str {
        self.g().owner()
    }

    /// How many permits this hold takes.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) { println!("{}", g.permits()); }
    /// ```
    pub fn permits(&self) -> u32 {
        self.g().permits()
    }

    /// The lease status.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) { println!("{:?}", g.status()); }
    /// ```
    pub fn status(&self) -> LeaseStatus {
        self.g().status()
    }

    /// Whether the lease is certainly valid now.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) { assert!(g.is_held()); }
    /// ```
    pub fn is_held(&self) -> bool {
        self.g().is_held()
    }

    /// `Ok(())` while held, [`crate::Error::LeaseLost`] after.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) -> redis_lease_client::Result<()> { g.check() }
    /// ```
    pub fn check(&self) -> Result<()> {
        self.g().check()
    }

    /// Blocks until the lease is lost or `timeout` passes; answers the reason if lost.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) {
    /// if let Some(reason) = g.wait_lost(std::time::Duration::from_secs(1)) { eprintln!("{reason}"); }
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
        let lost = self.g().lost();
        self.rt
            .block_on(async { tokio::time::timeout(timeout, lost).await.ok() })
    }

    /// See [`crate::SemaphoreGuard::exec`].
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::SemaphoreGuard) -> redis_lease_client::Result<()> {
    /// let n: i64 = g.exec(redis::cmd("INCR").arg("{k}:n"))?;
    /// # Ok(()) }
    /// ```
    pub fn exec<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.rt.block_on(self.g().exec(cmd))
    }

    /// Stops renewing and releases the permits.
    ///
    /// ```no_run
    /// # fn f(g: redis_lease_client::blocking::SemaphoreGuard) -> redis_lease_client::Result<()> {
    /// g.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<bool> {
        let g = self.inner.take().expect("guard");
        self.rt.block_on(g.release())
    }
}

impl Drop for SemaphoreGuard {
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                let _enter = self.rt.enter();
                drop(g);
            } else {
                let _ = self.rt.block_on(g.release());
            }
        }
    }
}
