//! The module's settings: Redis 7 module configs (`CONFIG SET lease.max-ttl 1000`), also
//! accepted as `loadmodule` arguments (`loadmodule lease.so max-ttl 5000`).

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

pub const DEFAULT_MAX_TTL: i64 = 86_400_000;
/// Redis's own `maxclients` default: each waiter is a connection, so more cannot wait anyway,
/// and each costs tens of KB of the server's blocked-client machinery (see the README).
pub const DEFAULT_MAX_WAITERS: i64 = 10_000;
pub const DEFAULT_MAX_ID_LENGTH: i64 = 256;
/// The largest id any setting allows: ids longer than this can never be held.
pub const ID_LENGTH_CEILING: i64 = 1_048_576;

/// Longest lease in ms.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL);
/// Most waiters one key may queue.
pub static MAX_WAITERS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_WAITERS);
/// Longest owner or candidate id in bytes (for new holds).
pub static MAX_ID_LENGTH: AtomicI64 = AtomicI64::new(DEFAULT_MAX_ID_LENGTH);
/// After this server becomes a master, or loads its data, it makes no new grant for this
/// many ms (0: off); while it is set, it is also the longest lease.
pub static QUARANTINE: AtomicI64 = AtomicI64::new(0);

/// The longest any hold may last from its first grant, renewals included (0: no cap); a
/// request's `MAXHOLD` can only make it shorter.
pub static MAX_HOLD: AtomicI64 = AtomicI64::new(0);
/// Each lapse writes a notice line to the server log (else a verbose one).
pub static LOG_LAPSES: AtomicBool = AtomicBool::new(false);

fn get(v: &AtomicI64) -> u64 {
    v.load(Ordering::Relaxed).max(0) as u64
}

/// The longest lease a request may ask for: `lease.max-ttl`, and no longer than the
/// quarantine while one is configured (so no lease can outlive it).
pub fn max_ttl() -> u64 {
    let q = quarantine_ms();
    let max = get(&MAX_TTL).max(1);
    if q > 0 {
        max.min(q)
    } else {
        max
    }
}

pub fn max_waiters() -> usize {
    get(&MAX_WAITERS).max(1) as usize
}

pub fn max_id_length() -> usize {
    get(&MAX_ID_LENGTH).max(1) as usize
}

pub fn quarantine_ms() -> u64 {
    get(&QUARANTINE)
}

/// The cap for a request that asked for `asked` ms (0: none): the smaller of it and
/// `lease.max-hold`, 0 when neither is set.
pub fn max_hold(asked: u64) -> u64 {
    match (get(&MAX_HOLD), asked) {
        (0, a) => a,
        (m, 0) => m,
        (m, a) => m.min(a),
    }
}

pub fn log_lapses() -> bool {
    LOG_LAPSES.load(Ordering::Relaxed)
}
