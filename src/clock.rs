//! The one wall clock the module reads: ms since the Unix epoch, the same scale as Redis's
//! absolute expire times, so deadlines survive restarts and replication. Where the server
//! offers its own clock (`RedisModule_Microseconds`, 7.2+ and Valkey), the module reads that
//! one, so the module and the server always agree on the time (TIME, key expiry); on 7.0 it
//! reads the system clock directly.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

/// The server's clock in µs since the epoch, if it has one (set once, while the module loads).
static SERVER: OnceLock<fn() -> u64> = OnceLock::new();

/// Reads the wall clock through `f` (µs since the epoch) from now on.
pub fn use_server_clock(f: fn() -> u64) {
    let _ = SERVER.set(f);
}

pub fn now_ms() -> u64 {
    now().0
}

/// The time in whole ms (rounded down) and whether the clock is past it by a fraction of a ms
/// (deadlines computed from it then round up, so no lease is cut short).
pub fn now() -> (u64, bool) {
    let us = match SERVER.get() {
        Some(f) => f(),
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64),
    };
    (us / 1000, us % 1000 != 0)
}
