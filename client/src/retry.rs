//! Retry of transient failures: classification and exponential backoff with full jitter.

use std::time::{Duration, Instant};

use rand::Rng;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::error::Error;

/// How transient failures are retried.
///
/// The delay before retry `n` (counting from 0) is a uniformly random duration between zero and
/// `min(max_delay, base_delay * 2^n)` ("full jitter"), and never reaches past the caller's
/// deadline. Without a deadline of its own (a `try_*` call, an unlimited wait, a renewal), an
/// operation gives up after `budget` of uninterrupted failures.
///
/// ```
/// use std::time::Duration;
/// use redis_lease_client::RetryPolicy;
///
/// let policy = RetryPolicy {
///     base_delay: Duration::from_millis(10),
///     max_delay: Duration::from_millis(500),
///     budget: Duration::from_secs(10),
/// };
/// assert!(policy.base_delay < policy.max_delay);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first (largest possible) delay.
    pub base_delay: Duration,
    /// The cap on any single delay.
    pub max_delay: Duration,
    /// How long to keep retrying when the caller gave no deadline.
    pub budget: Duration,
}

impl Default for RetryPolicy {
    /// 20 ms base, 1 s cap, 30 s budget.
    fn default() -> Self {
        RetryPolicy {
            base_delay: Duration::from_millis(20),
            max_delay: Duration::from_secs(1),
            budget: Duration::from_secs(30),
        }
    }
}

/// What a failed request means for the caller.
#[derive(Debug)]
pub(crate) enum Failure {
    /// Worth retrying. `uncertain`: the request may have been executed (the reply was lost).
    Transient { uncertain: bool, err: RedisError },
    /// Not worth retrying.
    Fatal(Error),
}

/// Sorts a redis error into transient (and whether the request may have run) or fatal.
pub(crate) fn classify(err: RedisError) -> Failure {
    match err.kind() {
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly
            | ServerErrorKind::Moved
            | ServerErrorKind::Ask,
        ) => Failure::Transient {
            uncertain: false,
            err,
        },
        ErrorKind::Io => {
            // A refused connection never carried the request; anything else (a reset, a
            // timeout, a dropped connection) may have lost the reply of an executed request.
            let uncertain = !err.is_connection_refusal();
            Failure::Transient { uncertain, err }
        }
        ErrorKind::ClusterConnectionNotFound => Failure::Transient {
            uncertain: true,
            err,
        },
        ErrorKind::Extension => match err.code() {
            Some("DEADLOCK") => Failure::Fatal(Error::Deadlock(err.to_string())),
            Some("LOCKGONE") => Failure::Fatal(Error::LockGone(err.to_string())),
            Some("MAXHOLD") => Failure::Fatal(Error::MaxHold(server_text(&err))),
            Some("FENCED") => Failure::Fatal(Error::Fenced(server_text(&err))),
            Some("LOADING" | "BUSY") => Failure::Transient {
                uncertain: false,
                err,
            },
            // A master demoted to replica (a failover) unblocks its waiters; they were not
            // granted there, so ask again (the new master will answer). An operator's
            // CLIENT UNBLOCK ... ERROR stays an error.
            Some("UNBLOCKED") if err.to_string().contains("instance state changed") => {
                Failure::Transient {
                    uncertain: false,
                    err,
                }
            }
            _ => Failure::Fatal(refusal(err)),
        },
        _ => Failure::Fatal(refusal(err)),
    }
}

/// The server's refusals a caller can act on, as typed errors: a server without the module,
/// a ttl above the server's limit.
pub(crate) fn refusal(err: RedisError) -> Error {
    let detail = err.detail().unwrap_or_default();
    if err.code() == Some("ERR") {
        let module_command = ["'RWLOCK.", "'LEADER.", "'SEMAPHORE.", "'LEASE."]
            .iter()
            .any(|p| detail.to_ascii_uppercase().contains(p));
        if detail.starts_with("unknown command") && module_command {
            return Error::ModuleNotLoaded(server_text(&err));
        }
        if let Some(rest) = detail.strip_prefix("ttl must be an integer from 1 to ") {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            if let Ok(ms) = digits.parse::<u64>() {
                return Error::TtlRefused {
                    max: Duration::from_millis(ms),
                    text: server_text(&err),
                };
            }
        }
    }
    Error::Redis(err)
}

/// An error reply as the server sent it (`CODE detail`), without redis-rs's quoting.
pub(crate) fn server_text(err: &RedisError) -> String {
    match (err.code(), err.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => err.to_string(),
    }
}

/// Exponential backoff with full jitter. Time is passed in (`now`), so the acquisition state
/// machine stays free of clocks; `*_now` wrappers read the clock for the I/O loops.
#[derive(Debug)]
pub(crate) struct Backoff {
    policy: RetryPolicy,
    attempt: u32,
    /// When the current run of failures started.
    since: Instant,
}

impl Backoff {
    pub(crate) fn new(policy: RetryPolicy, now: Instant) -> Self {
        Backoff {
            policy,
            attempt: 0,
            since: now,
        }
    }

    pub(crate) fn new_now(policy: RetryPolicy) -> Self {
        Backoff::new(policy, Instant::now())
    }

    /// The next delay (full jitter), or `None` if `deadline` (or, without one, the budget)
    /// does not leave room for another try.
    pub(crate) fn next_delay(
        &mut self,
        now: Instant,
        deadline: Option<Instant>,
    ) -> Option<Duration> {
        let limit = deadline.unwrap_or(self.since + self.policy.budget);
        if now >= limit {
            return None;
        }
        let exp = self
            .policy
            .base_delay
            .saturating_mul(1u32.checked_shl(self.attempt.min(20)).unwrap_or(u32::MAX));
        let ceiling = exp.min(self.policy.max_delay);
        self.attempt += 1;
        let nanos = ceiling.as_nanos().min(u64::MAX as u128) as u64;
        let d = Duration::from_nanos(rand::rng().random_range(0..=nanos));
        Some(d.min(limit - now))
    }

    pub(crate) fn next_delay_now(&mut self, deadline: Option<Instant>) -> Option<Duration> {
        self.next_delay(Instant::now(), deadline)
    }

    /// The error to report when giving up at `now`.
    pub(crate) fn give_up(&self, now: Instant, last: RedisError) -> Error {
        Error::Unavailable {
            attempts: self.attempt + 1,
            elapsed: now.saturating_duration_since(self.since),
            last,
        }
    }

    pub(crate) fn give_up_now(&self, last: RedisError) -> Error {
        self.give_up(Instant::now(), last)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn delays_stay_under_the_cap_and_the_deadline() {
        let policy = RetryPolicy {
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
            budget: Duration::from_secs(60),
        };
        let now = Instant::now();
        let mut b = Backoff::new(policy, now);
        for _ in 0..50 {
            let d = b.next_delay(now, None).unwrap();
            assert!(d <= Duration::from_millis(40));
        }
        let past = now - Duration::from_millis(1);
        assert!(b.next_delay(now, Some(past)).is_none());
        let soon = now + Duration::from_millis(2);
        assert!(b.next_delay(now, Some(soon)).unwrap() <= Duration::from_millis(2));
        // Without a deadline, the budget limits the run of failures.
        assert!(b.next_delay(now + Duration::from_secs(61), None).is_none());
    }

    /// The error a server reply `-text` becomes.
    pub(crate) fn reply_error(text: &str) -> RedisError {
        let v = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
        v.extract_error().unwrap_err()
    }

    #[test]
    fn fenced_is_fatal_and_keeps_the_servers_text() {
        let e = reply_error("FENCED token 5 is not live on this key");
        match classify(e) {
            Failure::Fatal(Error::Fenced(t)) => {
                assert_eq!(t, "FENCED token 5 is not live on this key")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn classification() {
        let e: RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert!(matches!(
            classify(e),
            Failure::Transient {
                uncertain: false,
                ..
            }
        ));
        let e: RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert!(matches!(
            classify(e),
            Failure::Transient {
                uncertain: true,
                ..
            }
        ));
    }
}
