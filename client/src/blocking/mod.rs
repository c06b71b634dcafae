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

mod leader;
mod lock;
mod semaphore;

pub use leader::{Election, LeaderElector, LeaderObserver};
pub use lock::{LockGuard, RwLock};
pub use semaphore::{Semaphore, SemaphoreGuard};

use std::sync::Arc;

use tokio::runtime::Runtime;

use crate::error::Result;
use crate::leader::{LeaderInfo, ObserverOptions};

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
    conn: crate::connection::Client,
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
        let conn = rt.block_on(crate::connection::Client::open(url))?;
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
        let conn = rt.block_on(crate::connection::Client::cluster(nodes))?;
        Ok(Client { rt, conn })
    }

    /// The async client inside.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) { let inner = c.async_client(); }
    /// ```
    pub fn async_client(&self) -> &crate::connection::Client {
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
