//! Settings of a candidate ([`ElectionOptions`]).

use std::time::Duration;

use crate::lease::LeaseTiming;
use crate::retry::RetryPolicy;

/// Settings of a [`LeaderElector`].
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::{ElectionOptions, LeaseTiming};
/// let opts = ElectionOptions { timing: LeaseTiming::new(Duration::from_secs(2))?, ..Default::default() };
/// assert_eq!(opts.campaign_wait, Duration::from_secs(30));
/// # Ok::<(), redis_lease_client::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElectionOptions {
    /// Lease ttl, renewal period, drift margin. Default: 10 s ttl.
    pub timing: LeaseTiming,
    /// Retry of transient failures.
    pub retry: RetryPolicy,
    /// How long one `LEADER.CAMPAIGN ... WAIT ms` request waits in the server before the
    /// candidate asks again (default 30 s). Bounds how long a silently dead connection can go
    /// unnoticed.
    pub campaign_wait: Duration,
    /// How many replicas must acknowledge each win and renewal before it counts (default 0:
    /// none), as [`LockOptions::replicas`](crate::LockOptions::replicas). A win too few
    /// acknowledged is resigned and campaigned for again; a leader whose renewals stop
    /// reaching enough replicas steps down when its last confirmed bound passes.
    pub replicas: u32,
    /// How long each `WAIT` for replicas may take (default 1 s).
    pub replica_timeout: Duration,
    /// The longest one leadership may last from its win, renewals included (`MAXHOLD ms`;
    /// default `None`). At the cap the leader's renewal is refused and it steps down
    /// ([`LossReason::MaxHold`](crate::LossReason::MaxHold)).
    pub max_hold: Option<Duration>,
}

impl Default for ElectionOptions {
    fn default() -> Self {
        ElectionOptions {
            timing: LeaseTiming::default(),
            retry: RetryPolicy::default(),
            campaign_wait: Duration::from_secs(30),
            replicas: 0,
            replica_timeout: Duration::from_secs(1),
            max_hold: None,
        }
    }
}
