//! The settings of a lock or a semaphore: lease timing, retries, replica acknowledgement.

use std::time::Duration;

use crate::lease::{Acks, LeaseTiming};
use crate::retry::RetryPolicy;

/// Settings of a [`RwLock`](crate::RwLock) (and of a [`Semaphore`](crate::Semaphore)).
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::{LockOptions, LeaseTiming};
/// let opts = LockOptions { timing: LeaseTiming::new(Duration::from_secs(5))?, ..Default::default() };
/// assert_eq!(opts.timing.ttl(), Duration::from_secs(5));
/// assert_eq!(opts.replicas, 0);
/// # Ok::<(), redis_lease_client::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LockOptions {
    /// Lease ttl, renewal period, drift margin. Default: 10 s ttl.
    pub timing: LeaseTiming,
    /// Retry of transient failures.
    pub retry: RetryPolicy,
    /// How many replicas must acknowledge each grant and renewal before it counts (default 0:
    /// none). After each one the client sends `WAIT replicas replica_timeout` on the same
    /// connection. A grant that too few acknowledged is released and asked for again within
    /// the caller's deadline, then reported as [`Error::NotReplicated`](crate::Error::NotReplicated);
    /// a renewal that too few acknowledged does not extend the lease's validity bound, and a
    /// lease whose bound passes that way is lost with [`LossReason::NotReplicated`](crate::LossReason::NotReplicated).
    pub replicas: u32,
    /// How long each `WAIT` for replicas may take (default 1 s).
    pub replica_timeout: Duration,
    /// The longest a hold may last from its grant, renewals included (`MAXHOLD ms`; default
    /// `None`: no cap but the server's `lease.max-hold`). At the cap the watchdog's renewal is
    /// refused and the guard is lost with [`LossReason::MaxHold`](crate::LossReason::MaxHold);
    /// a ttl longer than it is [`Error::MaxHold`](crate::Error::MaxHold).
    pub max_hold: Option<Duration>,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            timing: LeaseTiming::default(),
            retry: RetryPolicy::default(),
            replicas: 0,
            replica_timeout: Duration::from_secs(1),
            max_hold: None,
        }
    }
}

impl LockOptions {
    /// Appends `MAXHOLD ms` to an acquisition when a cap is set.
    pub(crate) fn add_max_hold(&self, cmd: &mut redis::Cmd) {
        add_max_hold(self.max_hold, cmd);
    }

    pub(crate) fn acks(&self) -> Option<Acks> {
        Acks::new(self.replicas, self.replica_timeout)
    }

    /// The retry of a release: a lease's ttl at most (the hold lapses by itself after that).
    pub(crate) fn release_policy(&self) -> RetryPolicy {
        RetryPolicy {
            budget: self.timing.ttl(),
            ..self.retry
        }
    }
}

/// Appends `MAXHOLD ms` (at least 1) when `max_hold` is set.
pub(crate) fn add_max_hold(max_hold: Option<Duration>, cmd: &mut redis::Cmd) {
    if let Some(m) = max_hold {
        cmd.arg("MAXHOLD")
            .arg(m.as_millis().clamp(1, u64::MAX as u128) as u64);
    }
}
