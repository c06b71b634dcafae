//! The one clock the module reads: wall-clock ms since the Unix epoch, the same scale as
//! Redis's absolute expire times, so deadlines survive restarts and replication.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
