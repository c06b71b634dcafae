//! A blocking API for programs without an async runtime.
//!
//! It owns a small tokio runtime (one worker thread, which also runs the lease watchdogs) and
//! calls the async API: the algorithms exist once. Inside an async context (a tokio task) its
//! calls would block the runtime's thread, so they refuse with
//! [`Error::InsideAsyncRuntime`](crate::Error::InsideAsyncRuntime) instead (use the async
//! API there, or call it from `tokio::task::spawn_blocking`).
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

mod guard;
mod leader;
mod lock;
mod semaphore;

pub use guard::{Guard, LockGuard, SemaphoreGuard};
pub use leader::{Election, LeaderElector, LeaderObserver};
pub use lock::RwLock;
pub use semaphore::Semaphore;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::leader::{LeaderInfo, ObserverOptions};

fn runtime() -> Result<Arc<Rt>> {
    Ok(Arc::new(Rt(Some(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redis-lease")
            .enable_all()
            .build()?,
    ))))
}

/// The blocking API's runtime. Its calls refuse to run inside an async context (where
/// `Runtime::block_on` would panic); dropped there, it shuts down in the background (where
/// dropping a runtime would panic).
pub(crate) struct Rt(Option<tokio::runtime::Runtime>);

impl Rt {
    fn rt(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("runtime present until dropped")
    }

    /// `Err(InsideAsyncRuntime)` when called from inside an async context (where tokio
    /// refuses to block); `Ok` on a plain thread and in `spawn_blocking`.
    pub(crate) fn check(&self) -> Result<()> {
        self.block_on(async {})
    }

    /// Runs `f` to its end on this runtime, or answers `Err(InsideAsyncRuntime)` from inside
    /// an async context. Tokio tells the two apart only by panicking before it polls `f`
    /// ("Cannot start a runtime from within a runtime"), so where that is possible (a runtime
    /// is current: async code, but also `spawn_blocking`) that panic is caught; any other
    /// panic goes on.
    pub(crate) fn block_on<F: std::future::Future>(&self, f: F) -> Result<F::Output> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(self.rt().block_on(f));
        }
        let run = std::panic::AssertUnwindSafe(|| self.rt().block_on(f));
        match std::panic::catch_unwind(run) {
            Ok(out) => Ok(out),
            Err(payload) => {
                let text = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                if text.contains("from within a runtime") {
                    Err(Error::InsideAsyncRuntime)
                } else {
                    std::panic::resume_unwind(payload)
                }
            }
        }
    }

    /// Runs `f`, which answers a `Result`, to its end on this runtime.
    pub(crate) fn run<T>(&self, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        self.block_on(f)?
    }

    /// Makes this runtime the current one (for spawning) while the guard lives.
    pub(crate) fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.rt().enter()
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            // Inside a runtime's context dropping one may not block: shut down without
            // waiting (the worker thread ends on its own).
            if tokio::runtime::Handle::try_current().is_ok() {
                rt.shutdown_background();
            }
        }
    }
}

impl std::fmt::Debug for Rt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Rt")
    }
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
    rt: Arc<Rt>,
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
        let conn = rt.run(crate::connection::Client::open(url))?;
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
        let conn = rt.run(crate::connection::Client::cluster(nodes))?;
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
        self.rt.run(self.conn.current_leader(key))
    }

    /// Follows who leads the election on `key`.
    ///
    /// ```no_run
    /// # fn f(c: &redis_lease_client::blocking::Client) -> redis_lease_client::Result<()> {
    /// let obs = c.observe("k", Default::default())?;
    /// # Ok(()) }
    /// ```
    pub fn observe(&self, key: &str, opts: ObserverOptions) -> Result<LeaderObserver> {
        let inner = self.rt.run(self.conn.observe(key, opts))?;
        Ok(LeaderObserver {
            rt: self.rt.clone(),
            inner,
        })
    }
}
