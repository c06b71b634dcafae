//! The one clock the module reads: wall-clock ms since the Unix epoch, the same scale as
//! Redis's absolute expire times, so deadlines survive restarts and replication.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    now().0
}

/// The time in whole ms (rounded down) and whether the clock is past it by a fraction of a ms
/// (deadlines computed from it then round up, so no lease is cut short).
pub fn now() -> (u64, bool) {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or((0, false), |d| {
            (d.as_millis() as u64, d.subsec_nanos() % 1_000_000 != 0)
        })
}
