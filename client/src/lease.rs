//! Lease bookkeeping shared by locks and elections: the local validity bound and the watchdog
//! that renews a lease until it is released or lost.

use std::fmt;
use std::time::{Duration, Instant};

use redis::{Cmd, Value};
use tokio::sync::watch;

use crate::conn::Connector;
use crate::retry::{classify, Backoff, Failure, RetryPolicy};

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
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LossReason::Expired => "it could not be renewed before it would lapse",
            LossReason::Revoked => "the server no longer counts this holder",
            LossReason::Failed => "a renewal failed with a permanent error",
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

/// Lease timing: ttl, renewal period and drift margin.
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::LeaseTiming;
///
/// let t = LeaseTiming::new(Duration::from_secs(3));
/// assert_eq!(t.renew_every, Duration::from_secs(1));
/// assert!(t.margin() >= Duration::from_millis(30));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeaseTiming {
    /// The lease asked for with each grant and renewal (whole milliseconds, at least 1 ms).
    pub ttl: Duration,
    /// How often the watchdog renews (default: a third of the ttl).
    pub renew_every: Duration,
    /// The share of the ttl assumed lost to clock-rate differences between client and server
    /// (default 0.01); with `drift_floor`, it makes the drift margin.
    pub drift_factor: f64,
    /// A fixed part of the drift margin (default 2 ms).
    pub drift_floor: Duration,
}

impl LeaseTiming {
    /// Timing for `ttl`: renewal every third of it, margin 1% + 2 ms.
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::new(std::time::Duration::from_millis(900));
    /// assert_eq!(t.renew_every.as_millis(), 300);
    /// ```
    pub fn new(ttl: Duration) -> Self {
        LeaseTiming {
            ttl,
            renew_every: ttl / 3,
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
        }
    }

    /// The ttl in whole milliseconds, as sent to the server.
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::new(std::time::Duration::from_millis(1500));
    /// assert_eq!(t.ttl_ms(), 1500);
    /// ```
    pub fn ttl_ms(&self) -> u64 {
        (self.ttl.as_millis() as u64).max(1)
    }

    /// The drift margin subtracted from every validity bound.
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::new(std::time::Duration::from_secs(10));
    /// assert_eq!(t.margin().as_millis(), 102);
    /// ```
    pub fn margin(&self) -> Duration {
        self.ttl.mul_f64(self.drift_factor.clamp(0.0, 0.5)) + self.drift_floor
    }

    /// The validity bound of a lease granted or renewed by a request sent at `sent`.
    pub(crate) fn valid_until(&self, sent: Instant) -> Instant {
        let ttl = Duration::from_millis(self.ttl_ms());
        (sent + ttl).checked_sub(self.margin()).unwrap_or(sent)
    }

    pub(crate) fn check(&self) -> crate::Result<()> {
        if self.ttl < Duration::from_millis(1) {
            return Err(crate::Error::InvalidArgument(
                "ttl must be at least 1 ms".into(),
            ));
        }
        if self.renew_every < Duration::from_millis(1)
            || self.renew_every + self.margin() >= self.ttl
        {
            return Err(crate::Error::InvalidArgument(format!(
                "renew_every {:?} must be at least 1 ms and leave the drift margin {:?} of the ttl {:?}",
                self.renew_every,
                self.margin(),
                self.ttl
            )));
        }
        if self.margin() >= self.ttl {
            return Err(crate::Error::InvalidArgument(format!(
                "the drift margin {:?} leaves nothing of the ttl {:?}",
                self.margin(),
                self.ttl
            )));
        }
        Ok(())
    }
}

/// How long to try confirming a fresh grant with a renewal: until its own validity bound, and at
/// least one command timeout (the bound may have passed during a long wait in the queue).
pub(crate) fn confirm_deadline(timing: &LeaseTiming, sent: Instant, timeout: Duration) -> Instant {
    timing.valid_until(sent).max(Instant::now() + timeout)
}

/// Outcome of one renewal with retries.
pub(crate) enum Renewal {
    /// Renewed by a request sent at that instant.
    Renewed(Instant),
    Lost(LossReason),
}

/// Renews until success, a definitive answer, or `valid_until`.
pub(crate) async fn renew_once(
    conn: &Connector,
    cmd: &Cmd,
    valid_until: Instant,
    policy: RetryPolicy,
) -> Renewal {
    let mut backoff = Backoff::new(policy);
    loop {
        let now = Instant::now();
        if now >= valid_until {
            return Renewal::Lost(LossReason::Expired);
        }
        let limit = conn.command_timeout().min(valid_until - now);
        match conn.query_within(cmd, limit).await {
            Ok(Value::Nil) => return Renewal::Lost(LossReason::Revoked),
            Ok(Value::Int(_)) => return Renewal::Renewed(now),
            Ok(_) => return Renewal::Lost(LossReason::Failed),
            Err(e) => match classify(e) {
                Failure::Transient { .. } => match backoff.next_delay(Some(valid_until)) {
                    Some(d) => tokio::time::sleep(d).await,
                    None => return Renewal::Lost(LossReason::Expired),
                },
                Failure::Fatal(_) => return Renewal::Lost(LossReason::Failed),
            },
        }
    }
}

/// Keeps a lease alive until it is lost; publishes every new validity bound on `tx`.
/// Returns the reason of the loss (after publishing it). Cancel it by dropping the future.
pub(crate) async fn watchdog(
    conn: Connector,
    renew: Cmd,
    timing: LeaseTiming,
    policy: RetryPolicy,
    mut last_sent: Instant,
    tx: watch::Sender<LeaseStatus>,
) -> LossReason {
    let mut valid_until = timing.valid_until(last_sent);
    let reason = loop {
        let renew_at = (last_sent + timing.renew_every).min(valid_until);
        tokio::time::sleep_until(renew_at.into()).await;
        match renew_once(&conn, &renew, valid_until, policy).await {
            Renewal::Renewed(sent) => {
                last_sent = sent;
                valid_until = timing.valid_until(sent);
                tx.send_replace(LeaseStatus::Held { valid_until });
            }
            Renewal::Lost(r) => break r,
        }
    };
    tx.send_replace(LeaseStatus::Lost(reason));
    reason
}

/// Waits until the status on `rx` is no longer `Held`, also noticing on its own when the
/// validity bound passes (should the watchdog be late).
pub(crate) async fn wait_lost(rx: &mut watch::Receiver<LeaseStatus>) -> LeaseStatus {
    loop {
        let status = *rx.borrow_and_update();
        match status {
            LeaseStatus::Held { valid_until } => {
                tokio::select! {
                    changed = rx.changed() => {
                        if changed.is_err() {
                            // The watchdog is gone without a word: trust only the bound.
                            tokio::time::sleep_until(valid_until.into()).await;
                            return LeaseStatus::Lost(LossReason::Expired);
                        }
                    }
                    _ = tokio::time::sleep_until(valid_until.into()) => {
                        if matches!(*rx.borrow(), LeaseStatus::Held { valid_until: v } if v <= Instant::now()) {
                            return LeaseStatus::Lost(LossReason::Expired);
                        }
                    }
                }
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timing_checks() {
        assert!(LeaseTiming::new(Duration::from_secs(1)).check().is_ok());
        assert!(LeaseTiming::new(Duration::ZERO).check().is_err());
        assert!(LeaseTiming::new(Duration::from_millis(2)).check().is_err());
        let mut t = LeaseTiming::new(Duration::from_secs(1));
        t.renew_every = Duration::ZERO;
        assert!(t.check().is_err());
        t.renew_every = Duration::from_millis(995);
        assert!(t.check().is_err());
    }

    #[test]
    fn validity_bound_is_send_time_plus_ttl_minus_margin() {
        let t = LeaseTiming::new(Duration::from_millis(1_000));
        let sent = Instant::now();
        assert_eq!(t.valid_until(sent), sent + Duration::from_millis(988));
    }
}
