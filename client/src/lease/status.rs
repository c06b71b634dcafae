//! What a holder sees of its lease: held until a local instant, lost (and why), or released.

use std::fmt;
use std::time::Instant;

/// Why a lease was lost.
///
/// ```
/// use redis_lease_client::LossReason;
/// assert_eq!(LossReason::Expired.to_string(), "it could not be renewed before it would lapse");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// No renewal succeeded before the local validity bound passed (the server was unreachable,
    /// paused or too slow). The server may still count the hold for a few milliseconds more,
    /// but nobody else can have been granted it yet.
    Expired,
    /// The server answered that this owner holds nothing any more (the lease lapsed on the
    /// server, or the key was deleted).
    Revoked,
    /// A renewal was answered with an error that retrying cannot fix.
    Failed,
    /// No renewal reached the replicas asked for
    /// ([`LockOptions::replicas`](crate::LockOptions::replicas)) before the last confirmed
    /// bound passed, so a failover could lose the lease.
    NotReplicated,
    /// The hold reached its cap (its first grant + its max hold: `max_hold` on the
    /// acquisition, or the server's `lease.max-hold`): the server refuses to renew it past
    /// that (`MAXHOLD`). It stays held until its current lease ends; release it.
    MaxHold,
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "it could not be renewed before it would lapse",
            LossReason::Revoked => "the server no longer counts this holder",
            LossReason::Failed => "a renewal failed with a permanent error",
            LossReason::NotReplicated => "no renewal reached enough replicas in time",
            LossReason::MaxHold => "it reached its max hold: the server renews it no further",
        })
    }
}

/// The state of a lease, as seen by its holder.
///
/// ```
/// use std::time::{Duration, Instant};
/// use redis_lease_client::{LeaseStatus, LossReason};
///
/// let s = LeaseStatus::Held { valid_until: Instant::now() + Duration::from_secs(1) };
/// assert!(s.is_held());
/// assert!(!LeaseStatus::Lost(LossReason::Expired).is_held());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Held; certainly valid until `valid_until` (a local instant: the moment the last granting
    /// or renewing request was sent, plus the ttl, minus the drift margin).
    Held {
        /// Until when the lease is certainly still valid on the server.
        valid_until: Instant,
    },
    /// Lost; the protected work must stop.
    Lost(LossReason),
    /// Released by its holder.
    Released,
}

impl LeaseStatus {
    /// Whether the lease is (still) held.
    ///
    /// ```
    /// assert!(!redis_lease_client::LeaseStatus::Released.is_held());
    /// ```
    pub fn is_held(&self) -> bool {
        matches!(self, LeaseStatus::Held { .. })
    }
}
