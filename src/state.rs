//! The module's process-wide state. Everything but the two gauges is touched only on Redis's
//! main thread (commands, timers, blocked-client callbacks, server events), so it lives in a
//! thread-local `RefCell`. Borrows are kept short and never held across a call into Redis
//! that can call back into the module (deleting a key runs our `unlink`).

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};

use redis_lease_core::Tokens;
use redis_module::raw;

/// A client parked by `WAIT`.
pub struct WaiterRec {
    pub bc: *mut raw::RedisModuleBlockedClient,
    pub db: i32,
    pub key: Box<[u8]>,
    pub since_ms: u64,
}

#[derive(Default, Clone, Copy)]
pub struct Stats {
    pub grants_read: u64,
    pub grants_write: u64,
    pub grants_leader: u64,
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
    /// Waiters whose client left (disconnected, killed, CLIENT UNBLOCK ... ERROR).
    pub waiters_left: u64,
}

#[derive(Default)]
pub struct Shell {
    pub tokens: Tokens,
    pub next_waiter: u64,
    pub waiters: HashMap<u64, WaiterRec>,
    pub by_client: HashMap<usize, u64>,
    /// (when, db, key): keys to look at again, earliest first.
    pub wakeups: BTreeSet<(u64, i32, Box<[u8]>)>,
    /// The armed Redis timer: (id, when).
    pub timer: Option<(u64, u64)>,
    /// Waiters that timed out or left, to take out of their key's queue: (db, key, id).
    pub cancels: Vec<(i32, Box<[u8]>, u64)>,
    pub stats: Stats,
}

thread_local! {
    static SHELL: RefCell<Shell> = RefCell::new(Shell::default());
}

pub fn with<T>(f: impl FnOnce(&mut Shell) -> T) -> T {
    SHELL.with(|s| f(&mut s.borrow_mut()))
}

/// Whether waiter `id` still belongs to a connected, blocked client.
pub fn waiter_alive(id: u64) -> bool {
    SHELL.with(|s| s.borrow().waiters.contains_key(&id))
}

/// Keys of the module's types that exist; values may be freed on a background thread, so
/// these two gauges are atomics.
static KEYS: AtomicI64 = AtomicI64::new(0);
static HOLDERS: AtomicI64 = AtomicI64::new(0);

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
