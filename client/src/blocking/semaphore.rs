//! Blocking semaphores.

use std::sync::Arc;
use std::time::Duration;

use super::guard::{Guard, SemaphoreGuard};
use super::Rt;
use crate::acquire::Wait;
use crate::error::Result;
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
    pub(super) rt: Arc<Rt>,
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
        Guard::new(self.rt.clone(), g)
    }

    /// Takes `permits` permits, waiting as long as it takes.
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = s.take(1)?;
    /// # Ok(()) }
    /// ```
    pub fn take(&self, permits: u32) -> Result<SemaphoreGuard> {
        let g = self.rt.run(self.inner.take(permits))?;
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
        self.acquire(permits, Wait::No)
    }

    /// Takes `permits` permits, waiting at most `wait`.
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = s.acquire_timeout(1, std::time::Duration::from_secs(1))?;
    /// # Ok(()) }
    /// ```
    pub fn acquire_timeout(&self, permits: u32, wait: Duration) -> Result<Option<SemaphoreGuard>> {
        self.acquire(permits, Wait::For(wait))
    }

    /// See [`crate::Semaphore::acquire`].
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// let g = s.acquire(1, redis_lease_client::Wait::No)?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, permits: u32, wait: Wait) -> Result<Option<SemaphoreGuard>> {
        let g = self.rt.run(self.inner.acquire(permits, wait))?;
        Ok(g.map(|g| self.wrap(g)))
    }

    /// The earlier name of [`Semaphore::acquire`], kept for code written against it.
    #[doc(hidden)]
    pub fn acquire_with(&self, permits: u32, wait: Wait) -> Result<Option<SemaphoreGuard>> {
        self.acquire(permits, wait)
    }

    /// See [`crate::Semaphore::info`].
    ///
    /// ```no_run
    /// # fn f(s: &redis_lease_client::blocking::Semaphore) -> redis_lease_client::Result<()> {
    /// println!("{:?}", s.info()?);
    /// # Ok(()) }
    /// ```
    pub fn info(&self) -> Result<SemaphoreInfo> {
        self.rt.run(self.inner.info())
    }
}
