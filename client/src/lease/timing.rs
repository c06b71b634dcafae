//! Lease timing: the ttl, the renewal period and the drift margin, and the local validity
//! bound they give.

use std::time::{Duration, Instant};

use crate::error::{InvalidArgument, Result};

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
