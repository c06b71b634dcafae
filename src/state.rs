//! The module's process-wide state. Everything but the two gauges is touched only on Redis's
//! main thread (commands, timers, blocked-client callbacks, server events), so it lives in a
//! `RefCell` only that thread may reach (`mainthread`).
//!
//! The borrow rule: a borrow never spans a call into Redis, since Redis may call back into the
//! module (deleting a key runs the `unlink` callback, which touches this state). The compiler
//! holds it: [`with`] takes only `Send` closures, and the C API layer's types (contexts, keys,
//! Redis strings) are not `Send`, so a closure given to `with` cannot reach Redis.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};

use redis_lease_core::{Ms, Tokens};

use crate::histogram::Histogram;
use crate::index::Index;
use crate::registry::Registry;

#[derive(Default, Clone, Copy, Debug)]
pub struct Stats {
    pub grants_read: u64,
    pub grants_write: u64,
    pub grants_leader: u64,
    pub grants_semaphore: u64,
    pub releases: u64,
    pub renewals: u64,
    pub lapses: u64,
    pub resignations: u64,
    pub waits: u64,
    pub wait_timeouts: u64,
    pub handoffs: u64,
    pub wait_ms_total: u64,
    pub wait_ms_max: u64,
    /// Waiters answered LOCKGONE (their key was deleted, renamed, moved or flushed).
    pub waiters_lockgone: u64,
    /// Waiters whose client left (disconnected, killed) or that a demotion sent away.
    pub waiters_left: u64,
    /// Keys with live leases that maxmemory eviction removed.
    pub evictions: u64,
    /// Times the server was found to have stopped running (SIGSTOP, a paused VM, a long
    /// blocking command, a forward clock step) for longer than the stall bound.
    pub stalls: u64,
    /// Requests refused because their wait would have closed a cycle of waits.
    pub deadlocks: u64,
    /// Grants held on an importing slot that opened when its source's token mark arrived,
    /// and that opened after waiting the longest (no mark came).
    pub floor_holds_ended: u64,
    pub floor_holds_expired: u64,
}

/// Grants held back on one key whose live leases were evicted, until they would have lapsed.
#[derive(Debug, Clone, Copy)]
pub struct Evicted {
    pub until: Ms,
}

#[derive(Default)]
pub struct Shell {
    pub tokens: Tokens,
    pub index: Index,
    pub waiters: Registry,
    /// The armed Redis timer: (id, when).
    pub timer: Option<(u64, Ms)>,
    /// No new grants before this time on the monotonic clock (0: none held back): the
    /// quarantine.
    pub quarantine_until: Ms,
    /// When the running quarantine started (or was last started again): it lasts
    /// `lease.quarantine` from then, so lowering the setting shortens it.
    pub quarantine_since: Ms,
    /// When the module last saw the server run, on the monotonic clock (a turn of the event
    /// loop, a cron tick or a command; 0: not yet).
    pub last_ran: Ms,
    /// The wall clock at the last request: a hint for requests to check for a stall (see
    /// `holdback::suspect`).
    pub last_wall: Ms,
    /// How far the wall clock was ahead of the monotonic one at the last turn of the event
    /// loop (see `schedule::wall_stepped`; `None`: not seen yet).
    pub wall_ahead: Option<i64>,
    /// A gap longer than this between two runs is a stall (see `holdback::ran`).
    pub stall_after: Ms,
    /// This server is a master (kept from the role events, for the hot path).
    pub master: bool,
    /// Evicted keys whose leases may still run, by (db, name).
    pub evicted: HashMap<(i32, Box<[u8]>), Evicted>,
    pub stats: Stats,
    /// The token high-water mark is to be written to the AOF (see `events::forked`).
    pub high_due: bool,
    /// How long every ended wait waited (granted or not) and every ended hold was held.
    pub wait_times: Histogram,
    pub hold_times: Histogram,
}

#[cfg(not(test))]
static SHELL: crate::mainthread::MainThread<Shell> = crate::mainthread::MainThread::new();

/// Runs `f` on the state. `f` is `Send`, so it cannot hold a Redis context, key or string, so
/// it cannot call back into Redis while the state is borrowed.
#[cfg(not(test))]
#[inline]
pub fn with<T>(f: impl FnOnce(&mut Shell) -> T + Send) -> T {
    SHELL.with(f)
}

// Unit tests run on many threads, each with a state of its own.
#[cfg(test)]
thread_local! {
    static SHELL: std::cell::RefCell<Shell> = std::cell::RefCell::new(Shell::default());
}

#[cfg(test)]
pub fn with<T>(f: impl FnOnce(&mut Shell) -> T + Send) -> T {
    SHELL.with(|s| f(&mut s.borrow_mut()))
}

/// Keys of the module's types that exist; values may be freed on a background thread, so
/// these two gauges are atomics.
static KEYS: AtomicI64 = AtomicI64::new(0);
static HOLDERS: AtomicI64 = AtomicI64::new(0);

/// Multi-key requests some key reported ready wait to be looked at (see `registry`): a flag
/// the hot path reads without borrowing the state.
static READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub fn set_ready(pending: bool) {
    READY.store(pending, Ordering::Relaxed);
}

#[inline]
pub fn ready_pending() -> bool {
    READY.load(Ordering::Relaxed)
}

pub fn count_key(delta: i64) {
    KEYS.fetch_add(delta, Ordering::Relaxed);
}

pub fn count_holders(delta: i64) {
    if delta != 0 {
        HOLDERS.fetch_add(delta, Ordering::Relaxed);
    }
}

pub fn keys() -> i64 {
    KEYS.load(Ordering::Relaxed)
}

pub fn holders() -> i64 {
    HOLDERS.load(Ordering::Relaxed)
}
