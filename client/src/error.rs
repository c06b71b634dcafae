//! The error types of this crate.

use std::time::Duration;

use crate::lease::status::LossReason;

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
///         Error::NotReplicated { .. } => "too few replicas confirmed the grant",
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

    /// The server does not know the module's commands: the redis-lease module is not loaded
    /// there. The text is the server's (`ERR unknown command 'RWLOCK.WLOCK' ...`).
    #[error(
        "the redis-lease module is not loaded on this server ({0}); load it with \
         `loadmodule /path/to/libredis_lease.so` in redis.conf, `--loadmodule \
         /path/to/libredis_lease.so` on redis-server's command line, or `MODULE LOAD \
         /path/to/libredis_lease.so`"
    )]
    ModuleNotLoaded(String),

    /// The server refused the ttl: it is above the server's `lease.max-ttl` (or
    /// `lease.quarantine`, while that is set). Nothing changed.
    #[error("the server refused the ttl: its longest lease is {} ms (lease.max-ttl, and lease.quarantine while set); it said: {text}", max.as_millis())]
    TtlRefused {
        /// The longest ttl the server accepts now.
        max: Duration,
        /// The server's text.
        text: String,
    },

    /// The server refused to let the request wait because the wait would deadlock (the
    /// module's `DEADLOCK` error): another reader of the same key already waits to upgrade, or
    /// the wait would close a cycle in the server's wait-for graph (an owner this request
    /// would wait for waits, directly or through others, for this owner). Nothing was queued
    /// and every hold is as it was: release what this owner holds and retry.
    #[error("refused to avoid a deadlock: {0}")]
    Deadlock(String),

    /// The ttl asked for would pass the hold's cap (`max_hold`, or the server's
    /// `lease.max-hold`; the module's `MAXHOLD` error, whose text gives the ms left).
    #[error("max hold: {0}")]
    MaxHold(String),

    /// The key was deleted while this request waited for it (the module's `LOCKGONE` error).
    #[error("the lock key was deleted while waiting: {0}")]
    LockGone(String),

    /// `LEASE.EXEC` ran nothing: the hold with the guard's token is not live on the server (it
    /// lapsed, was released or revoked, the key was deleted, or the token is a read hold's).
    /// The text is the server's (`FENCED ...`). Never retried.
    #[error("fenced: {0}")]
    Fenced(String),

    /// The semaphore exists with another limit than the one asked for (a request must name the
    /// key's limit while it exists). Nothing changed.
    #[error("the semaphore's limit is {limit}, the request named {asked}")]
    LimitMismatch {
        /// The existing key's limit.
        limit: u32,
        /// The limit the request named.
        asked: u32,
    },

    /// The owner already holds permits of this semaphore, another number than asked for (one
    /// hold per owner: release it first). Nothing changed.
    #[error("the owner holds {held} permit(s) of the semaphore, the request asked for {asked}")]
    PermitsMismatch {
        /// How many permits the owner holds.
        held: u32,
        /// How many the request asked for.
        asked: u32,
    },

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

    /// A grant was made, but fewer replicas than asked for
    /// ([`LockOptions::replicas`](crate::LockOptions::replicas)) confirmed it in time, so a
    /// failover could lose it. The client released it.
    #[error("the grant reached {acked} replica(s), {wanted} were asked for; it was released")]
    NotReplicated {
        /// How many replicas confirmed the grant (`WAIT`'s answer).
        acked: u32,
        /// How many were asked for.
        wanted: u32,
    },

    /// The server answered something this client does not understand (a contract mismatch).
    #[error("unexpected reply from the server: {0}")]
    Protocol(String),

    /// An argument was rejected before anything was sent.
    #[error("invalid argument: {0}")]
    InvalidArgument(#[from] InvalidArgument),

    /// The lease was lost: it could no longer be renewed before it would lapse, or the server
    /// answered that the owner holds nothing any more.
    #[error("lease lost: {0}")]
    LeaseLost(LossReason),

    /// The campaign of an [`Election`](crate::Election) stopped for good.
    #[error("campaign stopped: {0}")]
    CampaignStopped(CampaignError),

    /// The background task of a [`LeaderObserver`](crate::LeaderObserver) is gone.
    #[error("the leader observer stopped")]
    ObserverStopped,

    /// A call of the [`blocking`](crate::blocking) API from inside an async context (a tokio
    /// task or `block_on`), where it would block the runtime's thread. Use the async API
    /// there, or make the call from `tokio::task::spawn_blocking` or a plain thread.
    #[error(
        "the blocking client was called from inside an async runtime, where it would block the \
         runtime's thread; use the async client there, or call it from \
         tokio::task::spawn_blocking"
    )]
    InsideAsyncRuntime,

    /// The blocking API could not start its runtime, or an I/O error outside redis.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// Bad input, refused before anything is sent.
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::{Error, InvalidArgument, LeaseTiming};
///
/// let err = LeaseTiming::new(Duration::ZERO).unwrap_err();
/// assert!(matches!(err, Error::InvalidArgument(InvalidArgument::Ttl(_))));
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidArgument {
    /// A ttl below 1 ms.
    #[error("the ttl {0:?} is below 1 ms")]
    Ttl(Duration),
    /// A ttl too short to renew on this connection: a renewal, sent a renewal period after
    /// the last one, would have `window` before the lease's bound, and needs `need` (four
    /// round trips, at least 10 ms).
    #[error(
        "the ttl {ttl:?} is too short to renew on this connection: a renewal would have \
         {window:?} before the lease's bound and needs {need:?} (4 round trips of \
         {round_trip:?}, at least 10 ms)"
    )]
    TtlTooShort {
        /// The ttl asked for.
        ttl: Duration,
        /// The time a renewal would have.
        window: Duration,
        /// The time it needs.
        need: Duration,
        /// The round trip measured when the client connected.
        round_trip: Duration,
    },
    /// A renewal period below 1 ms, or one that leaves no room before the lease's validity bound.
    #[error(
        "renew_every {renew_every:?} must be at least 1 ms and leave the drift margin {margin:?} of the ttl {ttl:?}"
    )]
    RenewEvery {
        /// The renewal period asked for.
        renew_every: Duration,
        /// The drift margin.
        margin: Duration,
        /// The ttl.
        ttl: Duration,
    },
    /// A drift factor that is not a number from 0 to 0.5, or a margin that leaves nothing of
    /// the ttl.
    #[error("the drift margin ({factor} of the ttl + {floor:?}) does not fit the ttl {ttl:?}")]
    Drift {
        /// The share of the ttl.
        factor: f64,
        /// The fixed part.
        floor: Duration,
        /// The ttl.
        ttl: Duration,
    },
    /// A semaphore limit outside 1 to 2^31-1.
    #[error("the semaphore limit {0} is not from 1 to 2147483647")]
    Limit(u32),
    /// A number of permits outside 1 to the semaphore's limit.
    #[error("permits must be from 1 to the limit {limit}, not {permits}")]
    Permits {
        /// The permits asked for.
        permits: u32,
        /// The semaphore's limit.
        limit: u32,
    },
    /// A lock mode other than `read` or `write`.
    #[error("unknown lock mode {0:?} (read or write)")]
    UnknownMode(String),
    /// No node was given (a cluster or a sentinel list).
    #[error("no node given")]
    NoNodes,
    /// A URL this crate cannot use.
    #[error("bad url {url:?}: {reason}")]
    Url {
        /// The URL (without its password).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A setting this kind of connection cannot honour.
    #[error("{0}")]
    Unsupported(&'static str),
}

/// Why a campaign stopped for good ([`Leadership::error`](crate::Leadership::error)).
///
/// ```
/// use redis_lease_client::CampaignError;
/// let e = CampaignError::Refused { code: "WRONGTYPE".into(), message: "WRONGTYPE ...".into() };
/// assert!(e.to_string().contains("WRONGTYPE"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CampaignError {
    /// The server refused the campaign with an error that retrying cannot fix (`WRONGTYPE`,
    /// `NOPERM`, an unknown command because the module is not loaded, ...).
    #[error("refused by the server: {message}")]
    Refused {
        /// The error code (the first word of the reply, e.g. `WRONGTYPE`).
        code: String,
        /// The whole error.
        message: String,
    },
    /// The server answered something this client does not understand.
    #[error("unexpected reply: {0}")]
    Protocol(String),
    /// The campaign task ended without a word (it panicked, or the runtime shut down).
    #[error("the campaign task ended")]
    Ended,
}

impl CampaignError {
    pub(crate) fn from_error(e: Error) -> CampaignError {
        match e {
            Error::Redis(r) => CampaignError::Refused {
                code: r.code().unwrap_or("ERR").to_string(),
                message: r.to_string(),
            },
            Error::Protocol(p) => CampaignError::Protocol(p),
            other => CampaignError::Refused {
                code: "ERR".into(),
                message: other.to_string(),
            },
        }
    }
}

/// `Result` with this crate's [`Error`].
///
/// ```
/// fn f() -> redis_lease_client::Result<u64> { Ok(1) }
/// assert_eq!(f().unwrap(), 1);
/// ```
pub type Result<T, E = Error> = std::result::Result<T, E>;
