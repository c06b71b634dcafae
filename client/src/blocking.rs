//! A blocking API for programs without an async runtime.
//!
//! It owns a small tokio runtime (one worker thread, which also runs the lease watchdogs) and
//! calls the async API: the algorithms exist once. Do not use it from inside an async context
//! (calls would block the runtime's thread; use the async API there).
//!
//! ```no_run
//! # fn main() -> redis_lease_client::Result<()> {
//! use std::time::Duration;
//! use redis_lease_client::blocking::Client;
//!
//! let client = Client::open("redis://127.0.0.1/")?;
//! let lock = client.rwlock("reports").with_ttl(Duration::from_secs(5))?;
//! let guard = lock.write()?;
//! println!("token {}", guard.token());
//! guard.release()?;
//! # Ok(()) }
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;

use redis::{Cmd, FromRedisValue};

use crate::acquire::Wait;
use crate::error::Result;
use crate::leader::{ElectionOptions, LeaderInfo, Leadership, ObserverOptions};
use crate::lease_status::{LeaseStatus, LossReason};
use crate::lock_info::{LockInfo, LockMode};
use crate::lock_options::LockOptions;
use crate::semaphore_info::SemaphoreInfo;

fn runtime() -> Result<Arc<Runtime>> {
    Ok(Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis-lease")
            .enable_all()
            .build()?,
    ))
}

/// Entry point of the blocking API: an async [`crate::Client`] plus the runtime that drives it.
///
/// ```no_run
/// # fn main() -> redis_lease_client::Result<()> {
/// let client = redis_lease_client::blocking::Client::open("redis://127.0.0.1/")?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    rt: Arc<Runtime>,
    conn: crate::client::Client,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("conn", &self.conn).finish()
    }
}

impl Client {
    /// Connects given a URL: one server (`redis://`) or the master of a Sentinel group
    /// (`redis+sentinel://`), as [`crate::Client::open`].
    ///
    /// ```no_run
    /// # fn main() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::blocking::Client::open("redis://127.0.0.1:6379/")?;
    /// # Ok(()) }
    /// ```
    pub fn open(url: &str) -> Result<Client> {
        let rt = runtime()?;
        let conn = rt.block_on(crate::client::Client::open(url))?;
        Ok(Client { rt, conn })
    }

    /// Connects to a Redis Cluster given some of its nodes.
    ///
    /// ```no_run
    /// # fn main() -> redis_lease_client::Result<()> {
    /// let client = redis_lease_client::blocking::Client::cluster(["redis://127.0.0.1:7000/"])?;
    /// # Ok(()) }
    /// ```
    pub fn cluster<T: redis::IntoConnectionInfo>(
        nodes: impl IntoIterator<Item = T>,
    ) -> Result<Client> {
        let rt = runtime()?;
        let conn = rt.block_on(crate::client::Client::cluster(nodes))?;
        Ok(Client { rt, conn })
    }

    /// The async client inside.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let inner = c.async_client(); }
    /// ```
    pub fn async_client(&self) -> &crate::client::Client {
        &self.conn
    }

    /// A read-write lock on `key`.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let lock = c.rwlock("k"); }
    /// ```
    pub fn rwlock(&self, key: impl Into<String>) -> RwLock {
        RwLock {
            rt: self.rt.clone(),
            inner: self.conn.rwlock(key),
        }
    }

    /// A semaphore of `limit` permits on `key`.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let sem = c.semaphore("k", 3); }
    /// ```
    pub fn semaphore(&self, key: impl Into<String>, limit: u32) -> Semaphore {
        Semaphore {
            rt: self.rt.clone(),
            inner: self.conn.semaphore(key, limit),
        }
    }

    /// A candidate for the election on `key`.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let e = c.elector("k"); }
    /// ```
    pub fn elector(&self, key: impl Into<String>) -> LeaderElector {
        LeaderElector {
            rt: self.rt.clone(),
            inner: self.conn.elector(key),
        }
    }

    /// Who leads the election on `key`.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
    /// println!("{:?}", c.current_leader("k")?);
    /// # Ok(()) }
    /// ```
    pub fn current_leader(&self, key: &str) -> Result<Option<LeaderInfo>> {
        self.rt.block_on(self.conn.current_leader(key))
    }

    /// Follows who leads the election on `key`.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
    /// let obs = c.observe("k", Default::default())?;
    /// # Ok(()) }
    /// ```
    pub fn observe(&self, key: &str, opts: ObserverOptions) -> Result<LeaderObserver> {
        let inner = self.rt.block_on(self.conn.observe(key, opts))?;
        Ok(LeaderObserver {
            rt: self.rt.clone(),
            inner,
        })
    }
}

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
    rt: Arc<Runtime>,
    inner: crate::lock::RwLock,
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

    fn wrap(&self, g: Option<crate::guard::LockGuard>) -> Option<LockGuard> {
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
    rt: Arc<Runtime>,
    inner: Option<crate::guard::LockGuard>,
}

impl LockGuard {
    fn g(&self) -> &crate::guard::LockGuard {
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
    rt: Arc<Runtime>,
    inner: crate::semaphore::Semaphore,
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

    fn wrap(&self, g: crate::semaphore_guard::SemaphoreGuard) -> SemaphoreGuard {
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
    rt: Arc<Runtime>,
    inner: Option<crate::semaphore_guard::SemaphoreGuard>,
}

impl SemaphoreGuard {
    fn g(&self) -> &crate::semaphore_guard::SemaphoreGuard {
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

/// Blocking [`crate::LeaderElector`].
///
/// ```no_run
/// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
/// let election = c.elector("jobs").with_ttl(std::time::Duration::from_secs(3))?.start();
/// let term = election.wait_leader(None)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LeaderElector {
    rt: Arc<Runtime>,
    inner: crate::leader::LeaderElector,
}

impl LeaderElector {
    /// See [`crate::LeaderElector::with_candidate`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let e = c.elector("k").with_candidate("me"); }
    /// ```
    pub fn with_candidate(mut self, candidate: impl Into<String>) -> LeaderElector {
        self.inner = self.inner.with_candidate(candidate);
        self
    }

    /// See [`crate::LeaderElector::with_ttl`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
    /// let e = c.elector("k").with_ttl(std::time::Duration::from_secs(2))?;
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<LeaderElector> {
        self.inner = self.inner.with_ttl(ttl)?;
        Ok(self)
    }

    /// See [`crate::LeaderElector::with_replicas`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let e = c.elector("k").with_replicas(1); }
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> LeaderElector {
        self.inner = self.inner.with_replicas(replicas);
        self
    }

    /// See [`crate::LeaderElector::with_options`].
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let e = c.elector("k").with_options(Default::default()); }
    /// ```
    pub fn with_options(mut self, opts: ElectionOptions) -> LeaderElector {
        self.inner = self.inner.with_options(opts);
        self
    }

    /// Starts campaigning in the background.
    ///
    /// ```no_run
    /// # fn f(e: redis_lease_client::blocking::LeaderElector) { let election = e.start(); }
    /// ```
    pub fn start(&self) -> Election {
        let _enter = self.rt.enter();
        Election {
            rt: self.rt.clone(),
            inner: Some(self.inner.start()),
        }
    }
}

/// Blocking [`crate::Election`]. Dropping it resigns (blocking for the round trip).
///
/// ```no_run
/// # fn f(e: redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
/// if e.is_leader() { /* lead */ }
/// e.resign()?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Election {
    rt: Arc<Runtime>,
    inner: Option<crate::leader::Election>,
}

impl Election {
    fn e(&self) -> &crate::leader::Election {
        self.inner.as_ref().expect("election present until resign")
    }

    /// Whether this candidate leads now.
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) { println!("{}", e.is_leader()); }
    /// ```
    pub fn is_leader(&self) -> bool {
        self.e().is_leader()
    }

    /// This candidate's view of its leadership.
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) { println!("{:?}", e.leadership()); }
    /// ```
    pub fn leadership(&self) -> Leadership {
        self.e().leadership()
    }

    /// Blocks until this candidate leads (answers the term) or `timeout` passes (answers `Ok(None)`).
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
    /// let term = e.wait_leader(Some(std::time::Duration::from_secs(10)))?;
    /// # Ok(()) }
    /// ```
    pub fn wait_leader(&self, timeout: Option<Duration>) -> Result<Option<u64>> {
        let fut = self.e().wait_leader();
        self.rt.block_on(async {
            match timeout {
                Some(t) => match tokio::time::timeout(t, fut).await {
                    Ok(r) => r.map(Some),
                    Err(_) => Ok(None),
                },
                None => fut.await.map(Some),
            }
        })
    }

    /// Blocks until leadership is lost (or is not held), or `timeout` passes; answers whether
    /// it was lost.
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) {
    /// if e.wait_lost(std::time::Duration::from_secs(1)) { eprintln!("no longer leader"); }
    /// # }
    /// ```
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let lost = self.e().lost();
        let deadline = Instant::now() + timeout;
        self.rt
            .block_on(async { tokio::time::timeout_at(deadline.into(), lost).await.is_ok() })
    }

    /// See [`crate::Election::exec`].
    ///
    /// ```no_run
    /// # fn f(e: &redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
    /// let n: i64 = e.exec(redis::cmd("INCR").arg("{k}:n"))?;
    /// # Ok(()) }
    /// ```
    pub fn exec<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T> {
        self.rt.block_on(self.e().exec(cmd))
    }

    /// Stops campaigning and resigns.
    ///
    /// ```no_run
    /// # fn f(e: redis_lease_client::blocking::Election) -> redis_lease_client::Result<()> {
    /// e.resign()?;
    /// # Ok(()) }
    /// ```
    pub fn resign(mut self) -> Result<bool> {
        let e = self.inner.take().expect("election");
        self.rt.block_on(e.resign())
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        if let Some(e) = self.inner.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                let _enter = self.rt.enter();
                drop(e);
            } else {
                let _ = self.rt.block_on(e.resign());
            }
        }
    }
}

/// Blocking [`crate::LeaderObserver`].
///
/// ```no_run
/// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
/// let mut obs = c.observe("jobs", Default::default())?;
/// while let Some(next) = obs.next_change(std::time::Duration::from_secs(60))? {
///     println!("{next:?}");
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LeaderObserver {
    rt: Arc<Runtime>,
    inner: crate::leader::LeaderObserver,
}

impl LeaderObserver {
    /// The leader as last seen.
    ///
    /// ```no_run
    /// # fn f(o: &redis_lease_client::blocking::LeaderObserver) { println!("{:?}", o.current()); }
    /// ```
    pub fn current(&self) -> Option<LeaderInfo> {
        self.inner.current()
    }

    /// Blocks for the next change, at most `timeout`: `Ok(Some(state))` on a change,
    /// `Ok(None)` if none came in time.
    ///
    /// ```no_run
    /// # fn f(o: &mut redis_lease_client::blocking::LeaderObserver) -> redis_lease_client::Result<()> {
    /// let change = o.next_change(std::time::Duration::from_secs(5))?;
    /// # Ok(()) }
    /// ```
    pub fn next_change(&mut self, timeout: Duration) -> Result<Option<Option<LeaderInfo>>> {
        let inner = &mut self.inner;
        self.rt.block_on(async {
            match tokio::time::timeout(timeout, inner.changed()).await {
                Ok(r) => r.map(Some),
                Err(_) => Ok(None),
            }
        })
    }
}
