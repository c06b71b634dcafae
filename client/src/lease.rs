//! Lease bookkeeping shared by locks and elections: the local validity bound and the watchdog
//! that renews a lease until it is released or lost.

use std::time::{Duration, Instant};

use redis::{Cmd, Value};
use tokio::sync::watch;

use crate::client::Client;
use crate::error::{InvalidArgument, Result};
use crate::lease_status::{LeaseStatus, LossReason};
use crate::reply;
use crate::retry::{classify, Backoff, Failure, RetryPolicy};

/// Lease timing: ttl, renewal period and drift margin. Checked when it is built: a
/// `LeaseTiming` always leaves room for a renewal before its validity bound.
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::LeaseTiming;
///
/// let t = LeaseTiming::new(Duration::from_secs(3))?;
/// assert_eq!(t.renew_every(), Duration::from_secs(1));
/// assert!(t.margin() >= Duration::from_millis(30));
/// assert!(LeaseTiming::new(Duration::from_millis(2)).is_err());
/// # Ok::<(), redis_lease_client::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LeaseTiming {
    ttl: Duration,
    renew_every: Duration,
    drift_factor: f64,
    drift_floor: Duration,
}

impl Default for LeaseTiming {
    /// A 10 s ttl, renewed every 3.33 s, margin 1% + 2 ms.
    fn default() -> Self {
        LeaseTiming::new(Duration::from_secs(10)).expect("valid default timing")
    }
}

impl LeaseTiming {
    /// Timing for `ttl`: renewal every third of it, margin 1% + 2 ms. Fails for a ttl too
    /// short for that (below 4 ms).
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::new(std::time::Duration::from_millis(900))?;
    /// assert_eq!(t.renew_every().as_millis(), 300);
    /// # Ok::<(), redis_lease_client::Error>(())
    /// ```
    pub fn new(ttl: Duration) -> Result<Self> {
        LeaseTiming {
            ttl,
            renew_every: ttl / 3,
            drift_factor: 0.01,
            drift_floor: Duration::from_millis(2),
        }
        .checked()
    }

    /// The same timing with another renewal period.
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = redis_lease_client::LeaseTiming::new(Duration::from_secs(1))?
    ///     .with_renew_every(Duration::from_millis(100))?;
    /// assert_eq!(t.renew_every(), Duration::from_millis(100));
    /// # Ok::<(), redis_lease_client::Error>(())
    /// ```
    pub fn with_renew_every(mut self, renew_every: Duration) -> Result<Self> {
        self.renew_every = renew_every;
        self.checked()
    }

    /// The same timing with another drift margin: `factor` (0 to 0.5) of the ttl plus `floor`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = redis_lease_client::LeaseTiming::new(Duration::from_secs(10))?
    ///     .with_drift(0.05, Duration::from_millis(10))?;
    /// assert_eq!(t.margin(), Duration::from_millis(510));
    /// # Ok::<(), redis_lease_client::Error>(())
    /// ```
    pub fn with_drift(mut self, factor: f64, floor: Duration) -> Result<Self> {
        self.drift_factor = factor;
        self.drift_floor = floor;
        self.checked()
    }

    /// The lease asked for with each grant and renewal.
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::default();
    /// assert_eq!(t.ttl().as_secs(), 10);
    /// ```
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How often the watchdog renews (default: a third of the ttl).
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::default();
    /// assert_eq!(t.renew_every().as_millis(), 3333);
    /// ```
    pub fn renew_every(&self) -> Duration {
        self.renew_every
    }

    /// The ttl in whole milliseconds, as sent to the server.
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::new(std::time::Duration::from_millis(1500))?;
    /// assert_eq!(t.ttl_ms(), 1500);
    /// # Ok::<(), redis_lease_client::Error>(())
    /// ```
    pub fn ttl_ms(&self) -> u64 {
        (self.ttl.as_millis().min(u64::MAX as u128) as u64).max(1)
    }

    /// The drift margin subtracted from every validity bound: the share of the ttl assumed
    /// lost to clock-rate differences between client and server, plus a fixed part.
    ///
    /// ```
    /// let t = redis_lease_client::LeaseTiming::new(std::time::Duration::from_secs(10))?;
    /// assert_eq!(t.margin().as_millis(), 102);
    /// # Ok::<(), redis_lease_client::Error>(())
    /// ```
    pub fn margin(&self) -> Duration {
        self.ttl.mul_f64(self.drift_factor) + self.drift_floor
    }

    /// The validity bound of a lease granted or renewed by a request sent at `sent`.
    pub(crate) fn valid_until(&self, sent: Instant) -> Instant {
        let ttl = Duration::from_millis(self.ttl_ms());
        (sent + ttl).checked_sub(self.margin()).unwrap_or(sent)
    }

    fn checked(self) -> Result<Self> {
        if self.ttl < Duration::from_millis(1) {
            return Err(InvalidArgument::Ttl(self.ttl).into());
        }
        let factor = self.drift_factor;
        if !(0.0..=0.5).contains(&factor) || self.margin() >= self.ttl {
            return Err(InvalidArgument::Drift {
                factor,
                floor: self.drift_floor,
                ttl: self.ttl,
            }
            .into());
        }
        if self.renew_every < Duration::from_millis(1)
            || self.renew_every + self.margin() >= self.ttl
        {
            return Err(InvalidArgument::RenewEvery {
                renew_every: self.renew_every,
                margin: self.margin(),
                ttl: self.ttl,
            }
            .into());
        }
        Ok(self)
    }
}

/// How long to try confirming a fresh grant with a renewal: until its own validity bound, and at
/// least one command timeout (the bound may have passed during a long wait in the queue).
pub(crate) fn confirm_deadline(timing: &LeaseTiming, sent: Instant, timeout: Duration) -> Instant {
    timing.valid_until(sent).max(Instant::now() + timeout)
}

/// Replica acknowledgement of grants and renewals: `WAIT replicas timeout` after each, on the
/// same connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Acks {
    pub replicas: u32,
    pub timeout: Duration,
}

impl Acks {
    pub(crate) fn new(replicas: u32, timeout: Duration) -> Option<Acks> {
        (replicas > 0).then_some(Acks { replicas, timeout })
    }

    /// `WAIT replicas ms`, waiting at most `left` (never 0, which would wait forever).
    pub(crate) fn wait_cmd(&self, left: Duration) -> Cmd {
        let ms = self
            .timeout
            .min(left)
            .as_millis()
            .clamp(1, u64::MAX as u128) as u64;
        redis::cmd("WAIT").arg(self.replicas).arg(ms).to_owned()
    }
}

/// Splits the replies of `[command..., WAIT]`: the first command's reply (errors raised) and
/// how many replicas acknowledged.
pub(crate) fn split_acked(replies: Vec<Value>) -> redis::RedisResult<(Value, u32)> {
    let mut it = replies.into_iter();
    let first = it.next().unwrap_or(Value::Nil).extract_error()?;
    let acked = it.last().unwrap_or(Value::Nil).extract_error()?;
    let acked = reply::int(&acked).unwrap_or(0).clamp(0, u32::MAX as i64) as u32;
    Ok((first, acked))
}

/// How a lease is renewed: the command, and the replica acknowledgement asked for.
#[derive(Clone, Debug)]
pub(crate) struct Renewer {
    pub cmd: Cmd,
    pub acks: Option<Acks>,
}

/// Outcome of one renewal with retries.
#[derive(Debug)]
pub(crate) enum Renewal {
    /// Renewed (and acknowledged as asked) by a request sent at that instant.
    Renewed(Instant),
    Lost(LossReason),
    /// Out of time, the last renewal reaching only `acked` replicas.
    Unreplicated {
        acked: u32,
    },
}

/// Renews until success, a definitive answer, or `valid_until`. It gives up just before the
/// bound, so that the loss (and its reason) is published before the guard's own check of the
/// bound would report it as expired.
pub(crate) async fn renew_once(
    client: &Client,
    renew: &Renewer,
    valid_until: Instant,
    policy: RetryPolicy,
) -> Renewal {
    // A few ms ahead (at most 5 ms, a quarter of what is left): the last try's reply limit
    // ends there, and the watchdog still has time to publish the reason on a busy machine.
    let left = valid_until.saturating_duration_since(Instant::now());
    let stop = valid_until - (left / 4).min(Duration::from_millis(5));
    let mut backoff = Backoff::new_now(policy);
    // Replicas that acknowledged the last renewal the server granted, if too few.
    let mut short: Option<u32> = None;
    loop {
        let now = Instant::now();
        if now >= stop {
            return match short {
                Some(acked) => Renewal::Unreplicated { acked },
                None => Renewal::Lost(LossReason::Expired),
            };
        }
        let left = stop - now;
        let answer = match renew.acks {
            None => client
                .query_within(&renew.cmd, client.command_timeout().min(left))
                .await
                .map(|v| (v, None)),
            Some(a) => {
                let mut pipe = redis::pipe();
                pipe.add_command(renew.cmd.clone())
                    .add_command(a.wait_cmd(left));
                let limit = (client.command_timeout() + a.timeout).min(left);
                client
                    .pipe_dedicated(&pipe, Some(limit))
                    .await
                    .and_then(split_acked)
                    .map(|(v, acked)| (v, Some(acked)))
            }
        };
        match answer {
            Ok((Value::Nil, _)) => return Renewal::Lost(LossReason::Revoked),
            Ok((Value::Int(_), acked)) => match (renew.acks, acked) {
                (Some(a), Some(n)) if n < a.replicas => {
                    // Held on this server, but a failover could lose the renewal: it does not
                    // count. Perhaps this server is not the master any more.
                    short = Some(n);
                    client.suspect_master().await;
                }
                _ => return Renewal::Renewed(now),
            },
            Ok(_) => return Renewal::Lost(LossReason::Failed),
            Err(e) => {
                if let Failure::Fatal(_) = classify(e) {
                    return Renewal::Lost(LossReason::Failed);
                }
            }
        }
        if let Some(d) = backoff.next_delay_now(Some(stop)) {
            tokio::time::sleep(d).await;
        }
    }
}

/// Keeps a lease alive until it is lost; publishes every new validity bound on `tx`.
/// Returns the reason of the loss (after publishing it). Cancel it by dropping the future.
pub(crate) async fn watchdog(
    client: Client,
    renew: Renewer,
    timing: LeaseTiming,
    policy: RetryPolicy,
    mut last_sent: Instant,
    tx: watch::Sender<LeaseStatus>,
) -> LossReason {
    let mut valid_until = timing.valid_until(last_sent);
    let reason = loop {
        let renew_at = (last_sent + timing.renew_every()).min(valid_until);
        tokio::time::sleep_until(renew_at.into()).await;
        match renew_once(&client, &renew, valid_until, policy).await {
            Renewal::Renewed(sent) => {
                last_sent = sent;
                valid_until = timing.valid_until(sent);
                // A loss published by someone else (a FENCED answer) is final.
                let still_held = tx.send_if_modified(|s| match s {
                    LeaseStatus::Held { .. } => {
                        *s = LeaseStatus::Held { valid_until };
                        true
                    }
                    _ => false,
                });
                if !still_held {
                    return LossReason::Revoked;
                }
            }
            Renewal::Lost(r) => break r,
            Renewal::Unreplicated { .. } => break LossReason::NotReplicated,
        }
    };
    tx.send_if_modified(|s| match s {
        LeaseStatus::Held { .. } => {
            *s = LeaseStatus::Lost(reason);
            true
        }
        _ => false,
    });
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
    fn timing_is_checked_when_built() {
        assert!(LeaseTiming::new(Duration::from_secs(1)).is_ok());
        assert!(LeaseTiming::new(Duration::ZERO).is_err());
        assert!(LeaseTiming::new(Duration::from_micros(900)).is_err());
        assert!(LeaseTiming::new(Duration::from_millis(2)).is_err());
        assert!(LeaseTiming::new(Duration::from_millis(4)).is_ok());
        let t = LeaseTiming::new(Duration::from_secs(1)).unwrap();
        assert!(t.with_renew_every(Duration::ZERO).is_err());
        assert!(t.with_renew_every(Duration::from_millis(995)).is_err());
        assert!(t.with_renew_every(Duration::from_millis(900)).is_ok());
        assert!(t.with_drift(0.6, Duration::ZERO).is_err());
        assert!(t.with_drift(-0.1, Duration::ZERO).is_err());
        assert!(t.with_drift(f64::NAN, Duration::ZERO).is_err());
        assert!(t.with_drift(0.0, Duration::from_secs(1)).is_err());
        assert!(t.with_drift(0.0, Duration::ZERO).is_ok());
    }

    #[test]
    fn validity_bound_is_send_time_plus_ttl_minus_margin() {
        let t = LeaseTiming::new(Duration::from_millis(1_000)).unwrap();
        let sent = Instant::now();
        assert_eq!(t.valid_until(sent), sent + Duration::from_millis(988));
    }
}
