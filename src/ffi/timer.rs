//! Redis timers, created on a context that outlives any command (so that places without one,
//! RDB loading or a copy, can arm them too).

use std::os::raw::c_void;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use redis_module::raw;

use super::api;
use super::ctx::Ctx;
use super::guard;

static TIMER_CTX: AtomicPtr<raw::RedisModuleCtx> = AtomicPtr::new(std::ptr::null_mut());

/// How many of the module's timers Redis holds (created, not yet fired or stopped): INFO
/// shows it, so a leak of timers (each a callback per turn, and a slower `CreateTimer` for
/// all) cannot pass unseen.
static LIVE: AtomicU64 = AtomicU64::new(0);

/// Makes the long-lived context (once, while the module loads).
pub fn init(ctx: &Ctx) {
    // SAFETY: called from OnLoad with its context; the detached context lives for the
    // process and is only used on the main thread.
    let detached = unsafe { api!(RedisModule_GetDetachedThreadSafeContext)(ctx.raw()) };
    TIMER_CTX.store(detached, Ordering::Relaxed);
}

/// Runs `f` once, `ms` from now, on the main thread. `None` before `init`.
pub fn create(ms: u64, f: fn(&Ctx)) -> Option<u64> {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return None;
    }
    // SAFETY: a live detached context; `f` is a plain function pointer passed as the data.
    let id =
        unsafe { api!(RedisModule_CreateTimer)(ctx, ms as i64, Some(on_timer), f as *mut c_void) };
    LIVE.fetch_add(1, Ordering::Relaxed);
    Some(id)
}

/// Whether the timer `id` is still to fire (Redis holds it).
pub fn alive(id: u64) -> bool {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return false;
    }
    let (mut left, mut data) = (0u64, std::ptr::null_mut());
    // SAFETY: a live context and two out-parameters on the stack; Redis answers ERR for an
    // id it does not hold.
    let found = unsafe { api!(RedisModule_GetTimerInfo)(ctx, id, &mut left, &mut data) };
    found == raw::REDISMODULE_OK as i32
}

/// How many of the module's timers are still to fire.
pub fn live() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

/// Stops a timer that has not fired.
pub fn stop(id: u64) {
    let ctx = TIMER_CTX.load(Ordering::Relaxed);
    if ctx.is_null() {
        return;
    }
    // SAFETY: a live context; Redis answers ERR for an id that already fired. (During its own
    // callback a timer is still held, and stopping it there would free it twice: the timer's
    // turn forgets its own id first, see `schedule::fired`.)
    let stopped = unsafe { api!(RedisModule_StopTimer)(ctx, id, std::ptr::null_mut()) };
    if stopped == raw::REDISMODULE_OK as i32 {
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether Redis asks background writers to hold back (`CLIENT PAUSE WRITE`, `FAILOVER`).
pub fn avoid_replica_traffic() -> bool {
    // SAFETY: no arguments; present since Redis 6.0.
    super::api_opt!(RedisModule_AvoidReplicaTraffic).is_some_and(|f| unsafe { f() } != 0)
}

extern "C" fn on_timer(ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    // Redis drops the timer once this returns.
    LIVE.fetch_sub(1, Ordering::Relaxed);
    guard::callback("the timer", || {
        // SAFETY: `data` is the function pointer `create` passed; `ctx` is the timer's
        // context for this call.
        let f: fn(&Ctx) = unsafe { std::mem::transmute::<*mut c_void, fn(&Ctx)>(data) };
        // SAFETY: the timer's context, live for this call.
        if let Some(ctx) = unsafe { Ctx::from_raw(ctx) } {
            f(&ctx);
        }
    });
}
