//! Noticing lapses without waiting for the next command: every key with holders is woken at
//! its first lease deadline by one shared Redis timer, armed for the earliest wake-up of all.
//! On a master the wake-up prunes lapsed holders and hands the key to its waiters; a replica
//! only forgets the wake-up (its master's effects will arrive), and looks again when promoted.

use std::os::raw::c_void;
use std::sync::atomic::{AtomicPtr, Ordering};

use redis_lease_core::{Election, Lock, RwLock};
use redis_module::{raw, Context, ContextFlags, RedisString};

use crate::clock::now_ms;
use crate::commit::{commit, run, settle, Place};
use crate::key::{Found, Key};
use crate::state;
use crate::types::LeaseValue;

/// A context that outlives any command, for creating timers from places that have none
/// (RDB loading, copy).
static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

pub fn init(ctx: &Context) {
    let detached = unsafe { raw::RedisModule_GetDetachedThreadSafeContext.unwrap()(ctx.ctx) };
    TIMER_CTX.store(detached, Ordering::Relaxed);
}

/// Asks to look at `key` (in `db`) again when its first lease ends.
pub fn remember(db: i32, key: &[u8], lock: &mut Lock) {
    let Some(at) = lock.next_deadline() else {
        return;
    };
    if lock.wakeup != 0 && lock.wakeup <= at {
        return; // an earlier wake-up will look, and ask again
    }
    lock.wakeup = at;
    state::with(|s| s.wakeups.insert((at, db, key.into())));
    arm(at);
}

/// Drops the pending wake-up of a key that is going away, so that locks taken and released
/// quickly leave nothing behind (the timer itself stays armed; it re-arms when it fires).
pub fn forget(db: i32, key: &[u8], lock: &mut Lock) {
    if lock.wakeup == 0 {
        return;
    }
    let entry = (lock.wakeup, db, Box::<[u8]>::from(key));
    lock.wakeup = 0;
    state::with(|s| s.wakeups.remove(&entry));
}

/// The longest single timer; a later wake-up re-arms when it fires.
const MAX_TIMER_MS: u64 = 60_000;

/// Makes sure the timer fires no later than `at`.
pub fn arm(at: u64) {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return;
    }
    let stop = state::with(|s| match s.timer {
        Some((_, when)) if when <= at => Err(()),
        other => Ok(other.map(|(id, _)| id)),
    });
    let Ok(stop) = stop else { return };
    unsafe {
        if let Some(id) = stop {
            raw::RedisModule_StopTimer.unwrap()(ctx, id, std::ptr::null_mut());
        }
        // A far deadline (lease.max-ttl may be huge) must not overflow Redis's timer arithmetic
        // (ms * 1000 in a 64-bit µs clock): wake at most a minute ahead and look again.
        let period = at.saturating_sub(now_ms()).min(MAX_TIMER_MS) as i64;
        let id = raw::RedisModule_CreateTimer.unwrap()(
            ctx,
            period,
            Some(on_timer),
            std::ptr::null_mut(),
        );
        state::with(|s| s.timer = Some((id, at)));
    }
}

/// While a failover pauses writes (`CLIENT PAUSE WRITE`, `FAILOVER`), background writes must
/// wait: look again this much later.
const PAUSED_RETRY_MS: u64 = 10;

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, _data: *mut c_void) {
    state::with(|s| s.timer = None);
    let avoid = unsafe { raw::RedisModule_AvoidReplicaTraffic.map(|f| f() != 0) };
    if avoid == Some(true) {
        arm(now_ms() + PAUSED_RETRY_MS);
        return;
    }
    let ctx = Context::new(ctx);
    let _ = crate::guard::quietly(|| fire(&ctx));
    let next = state::with(|s| s.wakeups.first().map(|w| w.0));
    let pending = state::with(|s| !s.cancels.is_empty());
    if pending {
        arm(now_ms());
    } else if let Some(at) = next {
        arm(at);
    }
}

fn is_master(ctx: &Context) -> bool {
    ctx.get_flags().contains(ContextFlags::MASTER)
}

fn fire(ctx: &Context) {
    let now = now_ms();
    let master = is_master(ctx);
    let cancels = state::with(|s| std::mem::take(&mut s.cancels));
    for (db, key, id) in cancels {
        visit(ctx, db, &key, |place, lock| {
            lock.cancel_in(place, id, master)
        });
    }
    loop {
        let due = state::with(|s| {
            let first = s.wakeups.first()?;
            if first.0 > now {
                return None;
            }
            s.wakeups.pop_first()
        });
        let Some((_, db, key)) = due else { break };
        visit(ctx, db, &key, |place, lock| {
            lock.tick_in(place, now, master)
        });
    }
}

/// Opens `key` in `db` and hands its value (of either type) to `f`.
pub fn visit(ctx: &Context, db: i32, key: &[u8], f: impl FnOnce(&Place, &mut dyn Visit)) {
    unsafe {
        if raw::RedisModule_SelectDb.unwrap()(ctx.ctx, db) != raw::REDISMODULE_OK as i32 {
            return;
        }
    }
    let name = RedisString::create_from_slice(ctx.ctx, key);
    let Some(k) = Key::open_str(ctx.ctx, &name) else {
        return;
    };
    let place = Place {
        ctx,
        key: &k,
        name: &name,
        db,

        owner: None,
    };
    if let Found::Ours(v) = k.get::<RwLock>() {
        f(&place, v);
    } else if let Found::Ours(v) = k.get::<Election>() {
        f(&place, v);
    }
}

/// What a wake-up (or a key's move) does to a value, whichever its type.
pub trait Visit {
    fn tick_in(&mut self, place: &Place, now: u64, master: bool);
    fn cancel_in(&mut self, place: &Place, id: u64, master: bool);
    /// The key was renamed or moved here: its waiters were answered LOCKGONE when it left its
    /// old place, and its pending wake-up names the old place.
    fn moved_in(&mut self, place: &Place);
}

impl<V: LeaseValue> Visit for V {
    fn tick_in(&mut self, place: &Place, now: u64, master: bool) {
        self.lock_mut().wakeup = 0;
        if !master {
            // Lapses on a replica arrive from the master; look again only for live leases.
            if self.lock().next_deadline().is_some_and(|d| d > now) {
                remember(place.db, place.name.as_slice(), self.lock_mut());
            }
            return;
        }
        let before = self.lock().holder_count();
        let (changes, ()) = run(self, crate::clock::now(), |v, env| (v.tick(env), ()));
        commit(place, self, changes, true, before);
    }

    fn moved_in(&mut self, place: &Place) {
        let lock = self.lock_mut();
        lock.forget_waiters();
        lock.wakeup = 0;
        settle(place, self);
    }

    fn cancel_in(&mut self, place: &Place, id: u64, master: bool) {
        if !master {
            return;
        }
        let before = self.lock().holder_count();
        let (changes, _) = run(self, crate::clock::now(), |v, env| v.cancel(id, env));
        if changes.is_empty() {
            settle(place, self);
        } else {
            commit(place, self, changes, true, before);
        }
    }
}

/// After a promotion: look at every key of the module's types, since the replica let its
/// wake-ups go.
pub fn rescan(ctx: &Context) {
    let mut found: Vec<(i32, Vec<u8>)> = Vec::new();
    for db in 0..1024 {
        unsafe {
            if raw::RedisModule_SelectDb.unwrap()(ctx.ctx, db) != raw::REDISMODULE_OK as i32 {
                break;
            }
            let cursor = raw::RedisModule_ScanCursorCreate.unwrap()();
            let mut keys: Vec<Vec<u8>> = Vec::new();
            while raw::RedisModule_Scan.unwrap()(
                ctx.ctx,
                cursor,
                Some(scan_one),
                (&mut keys as *mut Vec<Vec<u8>>).cast(),
            ) != 0
            {}
            raw::RedisModule_ScanCursorDestroy.unwrap()(cursor);
            found.extend(keys.into_iter().map(|k| (db, k)));
        }
    }
    let now = now_ms();
    let master = is_master(ctx);
    for (db, key) in found {
        visit(ctx, db, &key, |place, lock| {
            lock.tick_in(place, now, master)
        });
    }
}

extern "C" fn scan_one(
    _ctx: *mut raw::RedisModuleCtx,
    name: *mut raw::RedisModuleString,
    key: *mut raw::RedisModuleKey,
    data: *mut c_void,
) {
    if key.is_null() || data.is_null() {
        return;
    }
    unsafe {
        let ty = raw::RedisModule_ModuleTypeGetType.unwrap()(key);
        let ours = ty == *RwLock::redis_type().raw_type.borrow()
            || ty == *Election::redis_type().raw_type.borrow();
        if ours {
            let keys = &mut *data.cast::<Vec<Vec<u8>>>();
            keys.push(RedisString::string_as_slice(name).to_vec());
        }
    }
}
