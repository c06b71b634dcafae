//! Rust client for **redis-lease**, the Redis module that gives Redis native distributed
//! read-write locks (`RWLOCK.*`), leader election (`LEADER.*`) and fair counting semaphores
//! (`SEMAPHORE.*`), each holder with its own lease and a fencing token, and writes fenced by the
//! server itself (`LEASE.EXEC`).
//!
//! * [`RwLock`]: `read`, `write`, `try_*`, `*_timeout`; the [`LockGuard`] exposes the fencing
//!   token, renews its lease in the background, signals **lease lost** before the server
//!   could grant the lock to anyone else, and upgrades or downgrades without letting go.
//! * [`Semaphore`]: at most `limit` permits held at once, waiters served strictly in arrival
//!   order; the [`SemaphoreGuard`] renews, signals loss and releases as a lock guard does.
//! * `exec` on [`LockGuard::exec`], [`SemaphoreGuard::exec`] and [`Election::exec`]: a command
//!   run inside Redis only while the hold is live (`LEASE.EXEC`), else [`Error::Fenced`].
//! * [`LeaderElector`] / [`Election`]: campaign, renew, step down, resign; leadership as a
//!   watch of [`Leadership`]. [`LeaderObserver`] reports who leads and every change, through
//!   keyspace notifications (no polling).
//! * [`Client`]: one server (through a [`redis::aio::ConnectionManager`]), the master of a
//!   Sentinel group (`redis+sentinel://`, following failovers), or a Redis Cluster;
//!   [`Client::rwlock`], [`Client::semaphore`] and [`Client::elector`] make locks, semaphores
//!   and candidates.
//! * [`Guard`]: what every guard is (token, key, owner, status, loss, `on_lost`, check, exec,
//!   release), for code that works under any kind of hold.
//! * [`blocking::Client`]: the same API for non-async programs (it drives the async one on a
//!   small runtime of its own; called from async code it answers
//!   [`Error::InsideAsyncRuntime`] instead of panicking). [`blocking::Guard`] is its one guard
//!   type, over any [`Guard`].
//!
//! Acquisitions wait inside the server (`WAIT ms`), in one round trip, on a connection of their
//! own. The client only retries what the server cannot handle: transient failures (connection
//! loss, `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY` after a failover), with
//! exponential backoff and full jitter, bounded by the caller's deadline. See [`RwLock`] for how
//! a retry after a lost reply avoids leaving an extra hold behind.
//!
//! # Leases, safety and fencing
//! The guard knows the latest local instant until which its lease is certainly valid: the moment
//! the granting (or last renewing) request was *sent*, plus the ttl, minus a drift margin
//! (1% of the ttl + 2 ms by default, see [`LeaseTiming`]). Past that instant, or as soon as a
//! renewal is answered with "not held", the guard reports the loss. A process can still be
//! paused between a check and its next action, so pass [`LockGuard::token`] to the resources you
//! protect and have them reject writes with an older token.
//!
//! # Failover
//! Redis replicates asynchronously: a grant the master answered but had not yet sent to a
//! replica is lost if that master dies. With [`LockOptions::replicas`] (and
//! [`ElectionOptions::replicas`]) every grant and renewal is followed by `WAIT replicas
//! timeout` on the same connection, and only counts once that many replicas acknowledged it.
//!
//! # Features
//! `cli` builds the `redis-lease` command-line tool (it adds `clap` and tokio's process and
//! signal support); the library needs none of it.
//!
//! # Example
//! ```no_run
//! # async fn demo() -> redis_lease_client::Result<()> {
//! use std::time::Duration;
//! use redis_lease_client::Client;
//!
//! let client = Client::open("redis://127.0.0.1:6379/").await?;
//!
//! // A lock.
//! let lock = client.rwlock("orders").with_ttl(Duration::from_secs(5))?;
//! if let Some(guard) = lock.write_timeout(Duration::from_secs(2)).await? {
//!     println!("token {}", guard.token());
//!     guard.release().await?;
//! }
//!
//! // An election.
//! let election = client.elector("scheduler").start();
//! let term = election.wait_leader().await?;
//! println!("leader in term {term}");
//! election.resign().await?;
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

mod acquire;
pub mod blocking;
mod connection;
mod error;
mod guard;
mod leader;
mod lease;
mod lock;
mod queue_info;
mod reply;
mod retry;
mod semaphore;

pub use acquire::Wait;
pub use connection::Client;
pub use error::{CampaignError, Error, InvalidArgument, Result};
pub use guard::Guard;
pub use leader::{
    Election, ElectionInfo, ElectionOptions, LeaderElector, LeaderInfo, LeaderObserver, Leadership,
    ObserverOptions,
};
pub use lease::status::{LeaseStatus, LossReason};
pub use lease::LeaseTiming;
pub use lock::guard::LockGuard;
pub use lock::info::{Holder, LockInfo, LockMode};
pub use lock::multi::{MultiGuard, MultiLock};
pub use lock::options::LockOptions;
pub use lock::RwLock;
pub use queue_info::Waiting;
pub use retry::RetryPolicy;
pub use semaphore::guard::SemaphoreGuard;
pub use semaphore::info::{SemaphoreHolder, SemaphoreInfo};
pub use semaphore::Semaphore;
