//! Acquiring a hold, as a state machine without I/O.
//!
//! The shell (the lock today, a semaphore later: any request that answers a token or nil, with
//! an INFO that shows the owner's hold) performs each [`Step`] and feeds back what happened.
//! Time is an input, so the rules are unit-tested without a server or a clock.
//!
//! The rules: transient failures are retried with backoff until the caller's deadline (or the
//! retry budget). A failure after which the request *may* have been granted (a lost reply)
//! makes the next step a read of INFO: a hold of the owner beyond the ones it had before
//! (`baseline`) is adopted instead of asking for a second one. A grant is only handed to the
//! caller once the shell has confirmed it (replica acks, a renewal if the wait used much of
//! the lease). While an outcome is unknown, [`Acquisition::needs_cleanup`] says that an
//! interrupted acquisition must release whatever it may have left behind.

pub(crate) mod drive;

use std::time::{Duration, Instant};

use redis::RedisError;

use crate::error::Error;
use crate::lease::status::LossReason;
use crate::retry::{Backoff, Failure, RetryPolicy};

/// How long an acquisition may wait for the lock.
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::Wait;
/// let w = Wait::For(Duration::from_secs(5));
/// assert_ne!(w, Wait::No);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Try once (no `WAIT`); transient failures are still retried within the retry budget.
    No,
    /// Wait in the server's queue for at most this long (`WAIT ms`); transient failures are
    /// retried until the same deadline.
    For(Duration),
    /// Wait without a time limit (`WAIT 0`).
    Forever,
}

/// The longest `WAIT ms` the module accepts (about 31 years).
const LONGEST_WAIT_MS: u64 = 1_000_000_000_000;

/// How the request should wait inside the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerWait {
    /// No `WAIT`: answer at once.
    Once,
    /// `WAIT ms` (at least 1).
    Ms(u64),
    /// `WAIT 0`.
    Forever,
}

/// The owner's hold as INFO shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HoldView {
    /// How many grants the hold counts (1 for a semaphore holder).
    pub count: u64,
    pub token: u64,
}

/// A grant to confirm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Grant {
    pub token: u64,
    /// The lease was granted by a request sent at this instant or later.
    pub since: Instant,
    /// How many replicas confirmed it along with the reply; `None` when not asked, or when
    /// the grant was adopted from INFO.
    pub acked: Option<u32>,
    /// Release with UNLOCK until the server answers 0: a surplus hold may exist.
    pub sweep: bool,
}

/// What the shell does next.
#[derive(Debug)]
pub(crate) enum Step {
    /// Read the owner's hold before the first attempt (a caller-chosen owner may hold some
    /// already); then [`Acquisition::on_baseline`].
    ReadBaseline,
    /// Send the acquire request; then [`Acquisition::on_reply`].
    Send(ServerWait),
    /// Read the owner's hold: was a request whose reply was lost granted? Then
    /// [`Acquisition::on_info`].
    ReadInfo,
    /// Confirm the grant; then [`Acquisition::on_confirm`].
    Confirm(Grant),
    /// Sleep; then [`Acquisition::on_timeout`].
    Sleep(Duration),
    /// Finished.
    Done(Outcome),
}

/// How an acquisition ended.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Held, certainly valid from a request sent at `last_sent`.
    Held {
        token: u64,
        last_sent: Instant,
        sweep: bool,
    },
    /// Not granted in time.
    NotGranted,
    Failed(Error),
}

/// An answer to [`Step::Send`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    Granted { token: u64, acked: Option<u32> },
    NotGranted,
}

/// What the shell's confirmation of a grant found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Confirmation {
    /// Proven by a request sent at this instant.
    Held(Instant),
    /// The server says the owner holds nothing: the grant lapsed already.
    Revoked,
    /// Unknown: no answer got through in time.
    Unsure(LossReason),
    /// Fewer replicas than asked for confirmed it; the shell released it.
    NotReplicated { acked: u32, wanted: u32 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Baseline,
    Sending(Instant),
    Info,
    Confirming(Grant),
    Sleeping(After),
    Done,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Baseline,
    Attempt,
}

/// One acquisition, from the first request to a guard, a "not granted" or an error.
#[derive(Debug)]
pub(crate) struct Acquisition {
    wait: Wait,
    deadline: Option<Instant>,
    /// The owner id is ours alone (a fresh UUID): surplus holds may be swept.
    generated: bool,
    /// The connection may resend a request by itself (a cluster client).
    resends: bool,
    retry: RetryPolicy,
    backoff: Backoff,
    /// Holds the owner had before the first attempt.
    baseline: u64,
    phase: Phase,
    /// When the first request whose outcome is unknown was sent.
    uncertain_since: Option<Instant>,
    /// Whether any request's outcome was unknown (only then can a surplus hold exist).
    had_uncertain: bool,
    /// Out of time with an unknown outcome: the error to report unless the final INFO finds
    /// a hold to adopt.
    last_error: Option<RedisError>,
    /// Something may be held that nobody will release: an interrupted acquisition must.
    armed: bool,
}

impl Acquisition {
    /// Starts an acquisition at `now`; answers it with its first step.
    pub(crate) fn new(
        wait: Wait,
        generated: bool,
        resends: bool,
        retry: RetryPolicy,
        now: Instant,
    ) -> (Acquisition, Step) {
        // A wait too long to have a deadline is a wait without one.
        let (wait, deadline) = match wait {
            Wait::For(d) => match now.checked_add(d) {
                Some(dl) => (wait, Some(dl)),
                None => (Wait::Forever, None),
            },
            _ => (wait, None),
        };
        let mut a = Acquisition {
            wait,
            deadline,
            generated,
            resends,
            retry,
            backoff: Backoff::new(retry, now),
            baseline: 0,
            phase: Phase::Baseline,
            uncertain_since: None,
            had_uncertain: false,
            last_error: None,
            armed: false,
        };
        let step = if generated {
            a.attempt(now)
        } else {
            Step::ReadBaseline
        };
        (a, step)
    }

    /// The caller's deadline, if it gave one.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.deadline
    }

    /// Whether an acquisition dropped now must release what it may have left behind.
    pub(crate) fn needs_cleanup(&self) -> bool {
        self.armed
    }

    /// The owner's hold before the first attempt (`None`: it holds nothing).
    pub(crate) fn on_baseline(
        &mut self,
        now: Instant,
        read: Result<Option<HoldView>, Failure>,
    ) -> Step {
        debug_assert_eq!(self.phase, Phase::Baseline);
        match read {
            Ok(hold) => {
                self.baseline = hold.map_or(0, |h| h.count);
                self.backoff = Backoff::new(self.retry, now);
                self.attempt(now)
            }
            Err(Failure::Transient { err, .. })
                if self.wait == Wait::No && err.is_connection_refusal() =>
            {
                let e = self.backoff.give_up(now, err);
                self.done(Outcome::Failed(e))
            }
            Err(Failure::Transient { err, .. }) => {
                self.retry_or(now, After::Baseline, |a| a.backoff.give_up(now, err))
            }
            Err(Failure::Fatal(e)) => self.done(Outcome::Failed(e)),
        }
    }

    /// The answer to [`Step::Send`].
    pub(crate) fn on_reply(&mut self, now: Instant, reply: Result<Reply, Failure>) -> Step {
        let Phase::Sending(sent) = self.phase else {
            debug_assert!(false, "a reply without a request: {:?}", self.phase);
            return self.done(Outcome::Failed(Error::Protocol(
                "reply out of order".into(),
            )));
        };
        match reply {
            Ok(Reply::NotGranted) => {
                self.armed = false;
                self.done(Outcome::NotGranted)
            }
            Ok(Reply::Granted { token, acked }) => {
                let since = self.uncertain_since.unwrap_or(sent);
                self.confirm(token, since, acked)
            }
            // A refused connection carried nothing, and a caller that does not wait wants an
            // answer now, not one after the retry budget.
            Err(Failure::Transient { err, .. })
                if self.wait == Wait::No
                    && err.is_connection_refusal()
                    && self.uncertain_since.is_none() =>
            {
                self.armed = false;
                let e = self.backoff.give_up(now, err);
                self.done(Outcome::Failed(e))
            }
            Err(Failure::Transient { uncertain, err }) => {
                if uncertain {
                    self.had_uncertain = true;
                    self.uncertain_since.get_or_insert(sent);
                } else if self.uncertain_since.is_none() {
                    self.armed = false;
                }
                match self.backoff.next_delay(now, self.deadline) {
                    Some(d) => self.sleep(d, After::Attempt),
                    // Out of time; but a request whose reply was lost may have been granted:
                    // one last look at INFO adopts such a hold.
                    None if self.uncertain_since.is_some() => {
                        self.last_error = Some(err);
                        self.attempt(now)
                    }
                    None => {
                        let e = self.backoff.give_up(now, err);
                        self.done(Outcome::Failed(e))
                    }
                }
            }
            Err(Failure::Fatal(e)) => {
                if self.uncertain_since.is_none() {
                    self.armed = false;
                }
                self.done(Outcome::Failed(e))
            }
        }
    }

    /// The answer to [`Step::ReadInfo`].
    pub(crate) fn on_info(
        &mut self,
        now: Instant,
        read: Result<Option<HoldView>, Failure>,
    ) -> Step {
        debug_assert_eq!(self.phase, Phase::Info);
        let since = self.uncertain_since.unwrap_or(now);
        match read {
            Ok(Some(h)) if h.count > self.baseline => self.confirm(h.token, since, None),
            Ok(_) => {
                self.uncertain_since = None;
                match self.last_error.take() {
                    // The deadline has passed and nothing was granted after all.
                    Some(err) => {
                        self.armed = false;
                        let e = self.backoff.give_up(now, err);
                        self.done(Outcome::Failed(e))
                    }
                    None => self.attempt(now),
                }
            }
            // Not waiting, and the server refuses connections: answer now. An earlier request
            // may have been granted, so the clean-up stays armed (it releases in the
            // background should the server come back).
            Err(Failure::Transient { err, .. })
                if self.wait == Wait::No && err.is_connection_refusal() =>
            {
                let e = self.backoff.give_up(now, err);
                self.done(Outcome::Failed(e))
            }
            Err(Failure::Transient { err, .. }) => {
                if self.last_error.is_some() {
                    let e = self.backoff.give_up(now, err);
                    return self.done(Outcome::Failed(e));
                }
                self.retry_or(now, After::Attempt, |a| a.backoff.give_up(now, err))
            }
            Err(Failure::Fatal(e)) => self.done(Outcome::Failed(e)),
        }
    }

    /// The answer to [`Step::Confirm`].
    pub(crate) fn on_confirm(&mut self, now: Instant, found: Confirmation) -> Step {
        let Phase::Confirming(grant) = self.phase else {
            debug_assert!(false, "a confirmation without a grant: {:?}", self.phase);
            return self.done(Outcome::Failed(Error::Protocol(
                "confirmation out of order".into(),
            )));
        };
        match found {
            Confirmation::Held(last_sent) => {
                self.armed = false;
                self.done(Outcome::Held {
                    token: grant.token,
                    last_sent,
                    sweep: grant.sweep,
                })
            }
            // The grant lapsed before it could be confirmed (a long wait in the queue): ask
            // again while the deadline allows.
            Confirmation::Revoked => {
                self.uncertain_since = None;
                self.last_error = None;
                if self.wait == Wait::No || self.deadline.is_some_and(|d| now >= d) {
                    self.armed = false;
                    self.done(Outcome::NotGranted)
                } else {
                    self.attempt(now)
                }
            }
            // Unknown, as after a lost reply: look at INFO next time.
            Confirmation::Unsure(reason) => {
                self.had_uncertain = true;
                self.uncertain_since = Some(grant.since);
                self.last_error = None;
                self.retry_or(now, After::Attempt, |_| Error::LeaseLost(reason))
            }
            Confirmation::NotReplicated { acked, wanted } => {
                self.uncertain_since = None;
                self.last_error = None;
                let e = Error::NotReplicated { acked, wanted };
                if self.wait == Wait::No {
                    return self.done(Outcome::Failed(e));
                }
                self.retry_or(now, After::Attempt, |_| e)
            }
        }
    }

    /// [`Step::Sleep`] is over.
    pub(crate) fn on_timeout(&mut self, now: Instant) -> Step {
        match self.phase {
            Phase::Sleeping(After::Baseline) => {
                self.phase = Phase::Baseline;
                Step::ReadBaseline
            }
            Phase::Sleeping(After::Attempt) => self.attempt(now),
            other => {
                debug_assert!(false, "a timeout while {other:?}");
                self.attempt(now)
            }
        }
    }

    /// The next request: INFO if an outcome is unknown, else the acquire request.
    fn attempt(&mut self, now: Instant) -> Step {
        if self.uncertain_since.is_some() {
            self.phase = Phase::Info;
            return Step::ReadInfo;
        }
        let wait = match (self.wait, self.deadline) {
            (Wait::Forever, _) => ServerWait::Forever,
            (Wait::For(_), Some(dl)) if dl > now + Duration::from_millis(1) => {
                ServerWait::Ms((dl - now).as_millis().min(LONGEST_WAIT_MS as u128) as u64)
            }
            _ => ServerWait::Once,
        };
        // The request may be granted and its reply lost from here on.
        self.armed = self.generated;
        self.phase = Phase::Sending(now);
        Step::Send(wait)
    }

    fn confirm(&mut self, token: u64, since: Instant, acked: Option<u32>) -> Step {
        let grant = Grant {
            token,
            since,
            acked,
            sweep: self.generated && (self.had_uncertain || self.resends),
        };
        self.phase = Phase::Confirming(grant);
        Step::Confirm(grant)
    }

    fn sleep(&mut self, d: Duration, then: After) -> Step {
        self.phase = Phase::Sleeping(then);
        Step::Sleep(d)
    }

    /// Sleeps before the next try if the deadline (or the budget) allows, else fails with
    /// `err`.
    fn retry_or(
        &mut self,
        now: Instant,
        then: After,
        err: impl FnOnce(&mut Acquisition) -> Error,
    ) -> Step {
        match self.backoff.next_delay(now, self.deadline) {
            Some(d) => self.sleep(d, then),
            None => {
                let e = err(self);
                self.done(Outcome::Failed(e))
            }
        }
    }

    fn done(&mut self, outcome: Outcome) -> Step {
        self.phase = Phase::Done;
        Step::Done(outcome)
    }
}

#[cfg(test)]
mod tests;
