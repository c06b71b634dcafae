//! Blocking read-write locks.

use std::sync::Arc;
use std::time::Duration;

use redis::{Cmd, FromRedisValue};
use tokio::runtime::Runtime;

use crate::acquire::Wait;
use crate::error::Result;
use crate::lease::status::{LeaseStatus, LossReason};
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
    pub(super) rt: Arc<Runtime>,
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
        g.map(|g| LockGuard {
            rt: self.rt.clone(),
            inner: Some(g),
        })
    }

    /// Takes a read lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
    /// let g = l.read()?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> Result<LockGuard> {
        let g = self.rt.block_on(self.inner.read())?;
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
        let g = self.rt.block_on(self.inner.write())?;
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
        let g = self.rt.block_on(self.inner.acquire(mode, wait))?;
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
        self.rt.block_on(self.inner.info())
    }
}

/// Blocking [`crate::LockGuard`]. Dropping it releases the lock (blocking for the round trip),
/// unless it is dropped inside an async context, where the release is spawned instead.
///
/// ```no_run
/// # fn f(l: &redis_lease_client::blocking::RwLock) -> redis_lease_client::Result<()> {
/// let g = l.write()?;
/// g.check()?; // before each step of the protected work
/// g.release()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LockGuard {
    pub(super) rt: Arc<Runtime>,
    pub(super) inner: Option<crate::lock::guard::LockGuard>,
}

impl LockGuard {
    fn g(&self) -> &crate::lock::guard::LockGuard {
        self.inner.as_ref().expect("guard present until release")
    }

    /// The fencing token.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { let t = g.token(); }
    /// ```
    pub fn token(&self) -> u64 {
        self.g().token()
    }

    /// The owner id.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{}", g.owner()); }
    /// ```
    pub fn owner(&self) -> &str {
        self.g().owner()
    }

    /// The mode held.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{}", g.mode()); }
    /// ```
    pub fn mode(&self) -> LockMode {
        self.g().mode()
    }

    /// See [`crate::LockGuard::exec`].
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// let n: i64 = g.exec(redis::cmd("INCR").arg("{k}:n"))?;
    /// # Ok(()) }
    /// ```
    pub fn exec<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.rt.block_on(self.g().exec(cmd))
    }

    /// See [`crate::LockGuard::upgrade`].
    ///
    /// ```no_run
    /// # fn f(mut g: redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// let upgraded = g.upgrade(redis_lease_client::Wait::No)?;
    /// # Ok(()) }
    /// ```
    pub fn upgrade(&mut self, wait: Wait) -> Result<bool> {
        let rt = self.rt.clone();
        let g = self.inner.as_mut().expect("guard present until release");
        rt.block_on(g.upgrade(wait))
    }

    /// See [`crate::LockGuard::downgrade`].
    ///
    /// ```no_run
    /// # fn f(mut g: redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// g.downgrade()?;
    /// # Ok(()) }
    /// ```
    pub fn downgrade(&mut self) -> Result<()> {
        let rt = self.rt.clone();
        let g = self.inner.as_mut().expect("guard present until release");
        rt.block_on(g.downgrade())
    }

    /// The lease status.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { println!("{:?}", g.status()); }
    /// ```
    pub fn status(&self) -> LeaseStatus {
        self.g().status()
    }

    /// Whether the lease is certainly valid now.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) { assert!(g.is_held()); }
    /// ```
    pub fn is_held(&self) -> bool {
        self.g().is_held()
    }

    /// `Ok(())` while held, [`crate::Error::LeaseLost`] after.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> { g.check() }
    /// ```
    pub fn check(&self) -> Result<()> {
        self.g().check()
    }

    /// Blocks until the lease is lost or `timeout` passes; answers the reason if lost.
    ///
    /// ```no_run
    /// # fn f(g: &redis_lease_client::blocking::LockGuard) {
    /// if let Some(reason) = g.wait_lost(std::time::Duration::from_secs(1)) { eprintln!("{reason}"); }
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> Option<LossReason> {
        let lost = self.g().lost();
        self.rt
            .block_on(async { tokio::time::timeout(timeout, lost).await.ok() })
    }

    /// Stops renewing and releases the hold.
    ///
    /// ```no_run
    /// # fn f(g: redis_lease_client::blocking::LockGuard) -> redis_lease_client::Result<()> {
    /// g.release()?;
    /// # Ok(()) }
    /// ```
    pub fn release(mut self) -> Result<bool> {
        let g = self.inner.take().expect("guard");
        self.rt.block_on(g.release())
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(g) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                // Inside an async context: the async guard spawns its release.
                let _enter = self.rt.enter();
                drop(g);
            } else {
                let _ = self.rt.block_on(g.release());
            }
        }
    }
}
