//! The one wall clock the module reads: ms since the Unix epoch, the same scale as Redis's
//! absolute expire times, so deadlines survive restarts and replication. Where the server
//! offers its own clock (`RedisModule_Microseconds`, 7.2+ and Valkey), the module reads that
//! one, so the module and the server always agree on the time (TIME, key expiry); on 7.0 it
//! reads the system clock directly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The server's clock in µs since the epoch, if it has one (set once, while the module loads).
static SERVER: OnceLock<fn() -> u64> = OnceLock::new();

/// Reads the wall clock through `f` (µs since the epoch) from now on.
pub fn use_server_clock(f: fn() -> u64) {
    let _ = SERVER.set(f);
}

/// The last time read (whole ms), so that a check that only needs to know whether a moment
/// has passed reads no clock again within a command.
static LAST_MS: AtomicU64 = AtomicU64::new(0);

pub fn now_ms() -> u64 {
    now().0
}

/// The time this command (or timer turn) last read, at most that stale; the clock itself
/// if nothing read it yet.
pub fn recent_ms() -> u64 {
    match LAST_MS.load(Ordering::Relaxed) {
        0 => now_ms(),
        ms => ms,
    }
}

/// The time in whole ms (rounded down) and whether the clock is past it by a fraction of a ms
/// (deadlines computed from it then round up, so no lease is cut short).
pub fn now() -> (u64, bool) {
    let us = match SERVER.get() {
        Some(f) => f(),
        None => system_us(),
    };
    LAST_MS.store(us / 1000, Ordering::Relaxed);
    (us / 1000, us % 1000 != 0)
}

/// The system's wall clock in µs, read directly (`SystemTime` costs three times as many
/// instructions, and every request reads the clock).
fn system_us() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer to a timespec; CLOCK_REALTIME always exists on Linux.
    if unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) } != 0 || ts.tv_sec < 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000 + (ts.tv_nsec as u64) / 1000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reads_the_system_time() {
        let sys = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let (ms, _) = now();
        assert!(ms.abs_diff(sys) < 1000, "{ms} against {sys}");
    }
}
