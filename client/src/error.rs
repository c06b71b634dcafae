//! The error type of this crate.

use std::time::Duration;

/// Everything that can go wrong in this crate.
///
/// Transient failures (a lost connection, `LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`,
/// `READONLY` or `UNBLOCKED` after a failover, a reply that did not come in time) are retried inside the
/// crate with exponential backoff and full jitter; they only reach the caller as
/// [`Error::Unavailable`] once the caller's deadline (or the retry budget of
/// [`RetryPolicy`](crate::RetryPolicy)) has run out.
///
/// ```
/// use redis_lease_client::Error;
///
/// fn describe(e: &Error) -> &'static str {
///     match e {
///         Error::Deadlock(_) => "two readers tried to upgrade at once",
///         Error::LockGone(_) => "the key was deleted while we waited",
///         Error::Unavailable { .. } => "redis could not be reached in time",
///         _ => "something else",
///     }
/// }
/// assert_eq!(describe(&Error::Deadlock("DEADLOCK".into())), "two readers tried to upgrade at once");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A definitive error reply or client error from redis that retrying cannot fix
    /// (for example `ERR` for a bad argument, `WRONGTYPE`, `NOPERM`, an unknown command because
    /// the module is not loaded).
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),

    /// The server refused an upgrade from read to write because another reader of the same key
    /// already waits to upgrade (the module's `DEADLOCK` error). Release the read lock and retry.
    #[error("upgrade refused to avoid a deadlock: {0}")]
    Deadlock(String),

    /// The key was deleted while this request waited for it (the module's `LOCKGONE` error).
    #[error("the lock key was deleted while waiting: {0}")]
    LockGone(String),

    /// Only transient failures were seen until the deadline or the retry budget ran out.
    #[error("redis unavailable after {attempts} attempts over {elapsed:?}: {last}")]
    Unavailable {
        /// How many requests were tried.
        attempts: u32,
        /// How long the client kept trying.
        elapsed: Duration,
        /// The last failure seen.
        last: redis::RedisError,
    },

    /// The server answered something this client does not understand (a contract mismatch).
    #[error("unexpected reply from the server: {0}")]
    Protocol(String),

    /// An argument was rejected before anything was sent (for example a ttl of zero).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The lease was lost: it could no longer be renewed before it would lapse, or the server
    /// answered that the owner holds nothing any more.
    #[error("lease lost: {0}")]
    LeaseLost(crate::LossReason),

    /// The blocking API could not start its runtime, or an I/O error outside redis.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// `Result` with this crate's [`Error`].
///
/// ```
/// fn f() -> redis_lease_client::Result<u64> { Ok(1) }
/// assert_eq!(f().unwrap(), 1);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
