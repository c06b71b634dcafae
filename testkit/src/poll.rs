//! Bounded waiting: every poll has a limit, and a poll that runs out fails the test (`until`)
//! or says so (`eventually`), never hangs. Also the local clock in ms, to turn ttls into
//! absolute deadlines.

use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often a poll looks again.
pub const POLL_EVERY: Duration = Duration::from_millis(10);

/// Polls `f` every `POLL_EVERY` until it is true or `limit` passes; answers whether it became
/// true (`f` runs at least once, and once more after the limit).
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if f() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        sleep(POLL_EVERY);
    }
}

/// Like `eventually`, but panics "timed out after {limit} waiting for {what}" if `f` never holds.
pub fn until(limit: Duration, what: &str, f: impl FnMut() -> bool) {
    assert!(
        eventually(limit, f),
        "timed out after {limit:?} waiting for {what}"
    );
}

/// The local clock, in ms since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Sleeps until the local clock reaches `at_ms` (ms since the epoch), plus `margin_ms`.
pub fn sleep_until(at_ms: i64, margin_ms: i64) {
    let wait = at_ms + margin_ms - now_ms();
    if wait > 0 {
        sleep(Duration::from_millis(wait as u64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventually_answers_false_once_the_limit_passes() {
        let start = Instant::now();
        let mut calls = 0;
        assert!(!eventually(Duration::from_millis(50), || {
            calls += 1;
            false
        }));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(calls >= 2);
    }

    #[test]
    fn eventually_answers_true_as_soon_as_it_holds() {
        let mut n = 0;
        assert!(eventually(Duration::from_secs(5), || {
            n += 1;
            n == 3
        }));
        assert_eq!(n, 3);
    }

    #[test]
    #[should_panic(expected = "waiting for the impossible")]
    fn until_panics_with_what_it_waited_for() {
        until(Duration::from_millis(20), "the impossible", || false);
    }
}
