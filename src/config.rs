//! The module's settings: Redis 7 module configs (`CONFIG SET lease.max-ttl 1000`), also
//! accepted as `loadmodule` arguments (`loadmodule lease.so max-ttl 5000`).

use std::sync::atomic::{AtomicI64, Ordering};

pub const DEFAULT_MAX_TTL: i64 = 86_400_000;
pub const DEFAULT_MAX_WAITERS: i64 = 100_000;
pub const DEFAULT_MAX_ID_LENGTH: i64 = 256;

/// Longest lease in ms.
pub static MAX_TTL: AtomicI64 = AtomicI64::new(DEFAULT_MAX_TTL);
/// Most waiters one key may queue.
pub static MAX_WAITERS: AtomicI64 = AtomicI64::new(DEFAULT_MAX_WAITERS);
/// Longest owner or candidate id in bytes.
pub static MAX_ID_LENGTH: AtomicI64 = AtomicI64::new(DEFAULT_MAX_ID_LENGTH);

pub fn max_ttl() -> u64 {
    MAX_TTL.load(Ordering::Relaxed).max(1) as u64
}

pub fn max_waiters() -> usize {
    MAX_WAITERS.load(Ordering::Relaxed).max(1) as usize
}

pub fn max_id_length() -> usize {
    MAX_ID_LENGTH.load(Ordering::Relaxed).max(1) as usize
}
