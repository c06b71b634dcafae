//! Blocking read-write locks.

use std::sync::Arc;
use std::time::Duration;

use super::guard::{Guard, LockGuard};
use super::Rt;
use crate::acquire::Wait;
use crate::error::Result;
use crate::lock::info::{LockInfo, LockMode};
use crate::lock::options::LockOptions;

/// Blocking [`crate::RwLock`].
///
/// ```no_run
/// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
/// let lock = c.rwlock("k");
/// if let Some(g) = lock.try_read()? { g.release()?; }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    pub(super) rt: Arc<Rt>,
    pub(super) inner: crate::lock::RwLock,
}

impl RwLock {
    /// See [`crate::RwLock::with_ttl`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
    /// let lock = c.rwlock("k").with_ttl(std::time::Duration::from_secs(3))?;
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<RwLock> {
        self.inner = self.inner.with_ttl(ttl)?;
        Ok(self)
    }

    /// See [`crate::RwLock::with_replicas`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) {
    /// let lock = c.rwlock("k").with_replicas(1);
    /// # }
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> RwLock {
        self.inner = self.inner.with_replicas(replicas);
        self
    }

    /// See [`crate::RwLock::with_options`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) {
    /// let lock = c.rwlock("k").with_options(Default::default());
    /// # }
    /// ```
    pub fn with_options(mut self, opts: LockOptions) -> RwLock {
        self.inner = self.inner.with_options(opts);
        self
    }

    /// See [`crate::RwLock::with_owner`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) {
    /// let lock = c.rwlock("k").with_owner("me");
    /// # }
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> RwLock {
        self.inner = self.inner.with_owner(owner);
        self
    }

    fn wrap(&self, g: Option<crate::lock::guard::LockGuard>) -> Option<LockGuard> {
        g.map(|g| Guard::new(self.rt.clone(), g))
    }

    /// Takes a read lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// let g = l.read()?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> Result<LockGuard> {
        let g = self.rt.run(self.inner.read())?;
        Ok(self.wrap(Some(g)).expect("guard"))
    }

    /// Takes the write lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// let g = l.write()?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> Result<LockGuard> {
        let g = self.rt.run(self.inner.write())?;
        Ok(self.wrap(Some(g)).expect("guard"))
    }

    /// Takes a read lock if free now.
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// let g = l.try_read()?;
    /// # Ok(()) }
    /// ```
    pub fn try_read(&self) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Read, Wait::No)
    }

    /// Takes the write lock if free now.
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// let g = l.try_write()?;
    /// # Ok(()) }
    /// ```
    pub fn try_write(&self) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Write, Wait::No)
    }

    /// Takes a read lock, waiting at most `wait`.
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// let g = l.read_timeout(std::time::Duration::from_secs(1))?;
    /// # Ok(()) }
    /// ```
    pub fn read_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Read, Wait::For(wait))
    }

    /// Takes the write lock, waiting at most `wait`.
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// let g = l.write_timeout(std::time::Duration::from_secs(1))?;
    /// # Ok(()) }
    /// ```
    pub fn write_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Write, Wait::For(wait))
    }

    /// See [`crate::RwLock::acquire`].
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// use redis_lease_client::{LockMode, Wait};
    /// let g = l.acquire(LockMode::Read, Wait::No)?;
    /// # Ok(()) }
    /// ```
    pub fn acquire(&self, mode: LockMode, wait: Wait) -> Result<Option<LockGuard>> {
        let g = self.rt.run(self.inner.acquire(mode, wait))?;
        Ok(self.wrap(g))
    }

    /// See [`crate::RwLock::info`].
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// println!("{:?}", l.info()?);
    /// # Ok(()) }
    /// ```
    pub fn info(&self) -> Result<LockInfo> {
        self.rt.run(self.inner.info())
    }
}
