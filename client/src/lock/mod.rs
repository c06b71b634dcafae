//! Distributed read-write locks (`RWLOCK.*`): the lock, which hands out [`LockGuard`]s.

pub(crate) mod guard;
pub(crate) mod info;
pub(crate) mod key;
pub(crate) mod multi;
pub(crate) mod options;

use std::fmt;
use std::time::Duration;

use crate::acquire::drive::Held;
use crate::acquire::Wait;
use crate::connection::Client;
use crate::error::Result;
use crate::lease::held::Lease;
use crate::lease::release::InflightCleanup;
use crate::lease::LeaseTiming;
use crate::lock::guard::LockGuard;
use crate::lock::info::{LockInfo, LockMode};
use crate::lock::key::LockKey;
use crate::lock::options::LockOptions;

/// A distributed read-write lock on one key.
///
/// Every acquisition uses a fresh UUIDv4 owner id, so guards of one `RwLock` (shared between
/// tasks) exclude each other like guards of different processes. With
/// [`RwLock::with_owner`] all acquisitions use the caller's id, and the server's reentrancy
/// applies (each grant needs its own release).
///
/// Acquisition is one request that waits inside the server (`WAIT`), on a connection of its
/// own: no polling. The client retries only what the server cannot handle: transient failures,
/// with exponential backoff and full jitter, bounded by the caller's deadline.
///
/// **Retries and lost replies.** If a reply is lost (connection reset, timeout), the request may
/// have been granted. Before asking again the client reads `RWLOCK.INFO`: if the owner already
/// holds the lock in that mode, it *adopts* that hold (its token from `INFO`) instead of asking
/// for a second one. A hold that a still-in-flight request adds after that check is not leaked
/// either: with a generated owner, releasing a guard whose acquisition saw an unknown outcome
/// (or that went through a cluster connection, whose client may resend a request by itself)
/// sends `RWLOCK.UNLOCK` until the server answers 0, which releases every hold of that owner;
/// otherwise a release is one `RWLOCK.UNLOCK`. With a caller-chosen owner the client
/// compares the hold count with the one read before the first attempt and releases exactly one
/// hold per guard (a hold duplicated by such a race then lapses with its lease).
///
/// ```no_run
/// # async fn demo() -> redis_lease_client::Result<()> {
/// use std::time::Duration;
/// use redis_lease_client::Client;
///
/// let client = Client::open("redis://127.0.0.1/").await?;
/// let lock = client.rwlock("inventory").with_ttl(Duration::from_secs(5))?;
/// let guard = lock.write().await?;
/// println!("fencing token {}", guard.token());
/// // ... critical section; pass guard.token() along with every write it protects ...
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RwLock {
    lock: LockKey,
    owner: Option<String>,
}

// Shown flat, as a lock's fields: the key and options it shares with its guards are a detail.
impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("client", &self.lock.client)
            .field("key", &self.lock.key)
            .field("owner", &self.owner)
            .field("opts", &self.lock.opts)
            .finish()
    }
}

impl Client {
    /// A read-write lock on `key`, with default options (10 s ttl).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let lock = client.rwlock("my-lock");
    /// # }
    /// ```
    pub fn rwlock(&self, key: impl Into<String>) -> RwLock {
        RwLock::new(self, key)
    }
}

impl RwLock {
    /// A lock on `key`, with default options (10 s ttl). Same as [`Client::rwlock`].
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let lock = redis_lease_client::RwLock::new(&client, "my-lock");
    /// # }
    /// ```
    pub fn new(client: &Client, key: impl Into<String>) -> RwLock {
        RwLock {
            lock: LockKey {
                client: client.clone(),
                key: key.into(),
                opts: LockOptions::default(),
            },
            owner: None,
        }
    }

    /// Sets the lease ttl (and the default timing derived from it). Fails for a ttl too short
    /// to renew (see [`LeaseTiming::new`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) -> redis_lease_client::Result<()> {
    /// let lock = client.rwlock("k").with_ttl(std::time::Duration::from_secs(2))?;
    /// # Ok(()) }
    /// ```
    pub fn with_ttl(mut self, ttl: Duration) -> Result<RwLock> {
        self.lock.opts.timing = LeaseTiming::new(ttl)?;
        Ok(self)
    }

    /// Sets how many replicas must acknowledge each grant and renewal
    /// ([`LockOptions::replicas`]).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let lock = client.rwlock("k").with_replicas(1);
    /// # }
    /// ```
    pub fn with_replicas(mut self, replicas: u32) -> RwLock {
        self.lock.opts.replicas = replicas;
        self
    }

    /// Sets all options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// use redis_lease_client::LockOptions;
    /// let lock = client.rwlock("k").with_options(LockOptions::default());
    /// # }
    /// ```
    pub fn with_options(mut self, opts: LockOptions) -> RwLock {
        self.lock.opts = opts;
        self
    }

    /// Uses `owner` for every acquisition instead of a fresh UUIDv4 (reentrant holds).
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let lock = client.rwlock("k").with_owner("worker-7");
    /// # }
    /// ```
    pub fn with_owner(mut self, owner: impl Into<String>) -> RwLock {
        self.owner = Some(owner.into());
        self
    }

    /// The key.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// assert_eq!(client.rwlock("k").key(), "k");
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.lock.key
    }

    /// The options.
    ///
    /// ```no_run
    /// # async fn demo(client: redis_lease_client::Client) {
    /// let ttl = client.rwlock("k").options().timing.ttl();
    /// # }
    /// ```
    pub fn options(&self) -> &LockOptions {
        &self.lock.opts
    }

    /// Takes a read lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.read().await?;
    /// # Ok(()) }
    /// ```
    pub async fn read(&self) -> Result<LockGuard> {
        self.acquire_forever(LockMode::Read).await
    }

    /// Takes the write lock, waiting as long as it takes.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.write().await?;
    /// # Ok(()) }
    /// ```
    pub async fn write(&self) -> Result<LockGuard> {
        self.acquire_forever(LockMode::Write).await
    }

    /// Takes a read lock if it is free now.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// if let Some(guard) = lock.try_read().await? { /* ... */ }
    /// # Ok(()) }
    /// ```
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Read, Wait::No).await
    }

    /// Takes the write lock if it is free now.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// match lock.try_write().await? {
    ///     Some(guard) => println!("got it: {}", guard.token()),
    ///     None => println!("busy"),
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Write, Wait::No).await
    }

    /// Takes a read lock, waiting at most `wait`.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.read_timeout(std::time::Duration::from_secs(3)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn read_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Read, Wait::For(wait)).await
    }

    /// Takes the write lock, waiting at most `wait`.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let guard = lock.write_timeout(std::time::Duration::from_secs(3)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn write_timeout(&self, wait: Duration) -> Result<Option<LockGuard>> {
        self.acquire(LockMode::Write, Wait::For(wait)).await
    }

    async fn acquire_forever(&self, mode: LockMode) -> Result<LockGuard> {
        loop {
            if let Some(g) = self.acquire(mode, Wait::Forever).await? {
                return Ok(g);
            }
        }
    }

    /// Reads `RWLOCK.INFO` (with retries of transient failures).
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// let info = lock.info().await?;
    /// for h in &info.holders { println!("{} {} token {}", h.owner, h.mode, h.token); }
    /// # Ok(()) }
    /// ```
    pub async fn info(&self) -> Result<LockInfo> {
        let l = &self.lock;
        let cmd = redis::cmd("RWLOCK.INFO").arg(&l.key).to_owned();
        LockInfo::parse(l.client.query_retry(&cmd, None, l.opts.retry).await?)
    }

    /// Acquires in `mode`, waiting as `wait` says. `Ok(None)`: not granted in time.
    ///
    /// ```no_run
    /// # async fn demo(lock: redis_lease_client::RwLock) -> redis_lease_client::Result<()> {
    /// use redis_lease_client::{LockMode, Wait};
    /// let guard = lock.acquire(LockMode::Write, Wait::For(std::time::Duration::from_secs(1))).await?;
    /// # Ok(()) }
    /// ```
    pub async fn acquire(&self, mode: LockMode, wait: Wait) -> Result<Option<LockGuard>> {
        let generated = self.owner.is_none();
        let owner = self
            .owner
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let mut cleanup = InflightCleanup::unlock(&self.lock.client, &self.lock.key, &owner);
        let held = self
            .lock
            .drive(
                mode,
                &owner,
                generated,
                wait,
                self.lock.opts.acks(),
                &mut cleanup,
            )
            .await?;
        Ok(held.map(|h| self.guard(mode, owner, h)))
    }

    /// A guard with a running watchdog for a confirmed grant.
    fn guard(&self, mode: LockMode, owner: String, h: Held) -> LockGuard {
        let l = &self.lock;
        let lease = Lease::start(
            &l.client,
            l.renewer(&owner),
            l.opts.timing,
            l.opts.retry,
            h.last_sent,
        );
        LockGuard::new(l.clone(), owner, mode, h, lease)
    }
}
