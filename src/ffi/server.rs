//! Server events and keyspace notifications the module listens to, and its module options.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::OnceLock;

use redis_module::raw;

use super::ctx::Ctx;
use super::string::RStr;
use super::{api, api_opt, guard};

/// Where data loading stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loading {
    Started,
    Ended,
    Failed,
}

/// What the module does on server events (implemented by its entry layer).
pub struct Handlers {
    /// FLUSHDB / FLUSHALL (and a replica's full sync, and DEBUG RELOAD), before anything is
    /// freed: `None` means every db.
    pub flush: fn(&Ctx, Option<i32>),
    pub swapdb: fn(i32, i32),
    /// The server became a master (`true`) or a replica.
    pub role: fn(&Ctx, bool),
    pub loading: fn(&Ctx, Loading),
    /// A generic keyspace event (`rename_to`, `move_to`, ...) on `key`, with the context's db
    /// selected.
    pub generic: fn(&Ctx, &[u8], RStr),
    /// A key was evicted by maxmemory (just after its value's unlink callback).
    pub evicted: fn(&Ctx, RStr),
    /// The server's cron ran; it runs `hz` times a second.
    pub cron: fn(&Ctx, i32),
    /// The event loop is about to sleep, or woke up (Redis 7.0+): the server is running.
    pub turn: fn(&Ctx),
    /// This server just forked a child (an RDB save, an AOF rewrite, a full sync); runs in
    /// the parent, after an AOF rewrite opened its new incremental file.
    pub forked: fn(&Ctx),
}

static HANDLERS: OnceLock<Handlers> = OnceLock::new();

fn handlers() -> Option<&'static Handlers> {
    HANDLERS.get()
}

fn subscribe(ctx: &Ctx, id: u64, cb: raw::RedisModuleEventCallback) -> Result<(), String> {
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    // SAFETY: called while loading; the callback is a plain function.
    let rc = unsafe { api!(RedisModule_SubscribeToServerEvent)(ctx.raw(), event, cb) };
    if rc == raw::REDISMODULE_OK as i32 {
        Ok(())
    } else {
        Err(format!("could not subscribe to server event {id}"))
    }
}

/// Valkey 8.1+'s `VALKEYMODULE_OPTIONS_SKIP_COMMAND_VALIDATION`: RM_Replicate and RM_EmitAOF
/// skip looking the command name up. Redis gives the bit no such meaning (and may give it
/// another), so it is set only on a Valkey that has it.
const VALKEY_SKIP_COMMAND_VALIDATION: c_int = 1 << 4;

static SKIPS_VALIDATION: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether the module set Valkey's skip-command-validation option (for INFO).
pub fn skipping_command_validation() -> bool {
    SKIPS_VALIDATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether this server is Valkey 8.1 or later (`valkey_version` in INFO server).
fn skips_command_validation(ctx: &Ctx) -> bool {
    let (Some(get), Some(field), Some(free)) = (
        api_opt!(RedisModule_GetServerInfo),
        api_opt!(RedisModule_ServerInfoGetFieldC),
        api_opt!(RedisModule_FreeServerInfo),
    ) else {
        return false;
    };
    // SAFETY: called while loading, on the main thread; the info data is freed before
    // returning and the field's text is copied out before that.
    let version = unsafe {
        let info = get(ctx.raw(), c"server".as_ptr());
        if info.is_null() {
            return false;
        }
        let v = field(info, c"valkey_version".as_ptr());
        let out =
            (!v.is_null()).then(|| std::ffi::CStr::from_ptr(v).to_string_lossy().into_owned());
        free(ctx.raw(), info);
        out
    };
    let Some(v) = version else { return false };
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (8, 1)
}

/// Sets the module options and subscribes `h` to every event it handles.
pub fn init(ctx: &Ctx, h: Handlers) -> Result<(), String> {
    let mut options = raw::REDISMODULE_OPTIONS_HANDLE_IO_ERRORS as c_int;
    if skips_command_validation(ctx) {
        options |= VALKEY_SKIP_COMMAND_VALIDATION;
    }
    // SAFETY: called while loading. HANDLE_IO_ERRORS makes a bad payload a load error (the
    // data-type callbacks check every read) instead of stopping the server.
    unsafe {
        api!(RedisModule_SetModuleOptions)(ctx.raw(), options);
    }
    SKIPS_VALIDATION.store(
        options & VALKEY_SKIP_COMMAND_VALIDATION != 0,
        std::sync::atomic::Ordering::Relaxed,
    );
    let _ = HANDLERS.set(h);
    subscribe(ctx, raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush))?;
    subscribe(ctx, raw::REDISMODULE_EVENT_SWAPDB, Some(on_swapdb))?;
    subscribe(
        ctx,
        raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
        Some(on_role),
    )?;
    subscribe(ctx, raw::REDISMODULE_EVENT_LOADING, Some(on_loading))?;
    subscribe(ctx, raw::REDISMODULE_EVENT_CRON_LOOP, Some(on_cron))?;
    subscribe(ctx, raw::REDISMODULE_EVENT_EVENTLOOP, Some(on_turn))?;
    subscribe(ctx, raw::REDISMODULE_EVENT_FORK_CHILD, Some(on_fork))?;
    let types = (raw::REDISMODULE_NOTIFY_GENERIC | raw::REDISMODULE_NOTIFY_EVICTED) as c_int;
    // SAFETY: called while loading; the callback is a plain function.
    let rc =
        unsafe { api!(RedisModule_SubscribeToKeyspaceEvents)(ctx.raw(), types, Some(on_keyspace)) };
    if rc != raw::REDISMODULE_OK as i32 {
        return Err("could not subscribe to keyspace events".into());
    }
    Ok(())
}

/// # Safety
/// `ctx` must be the context of the running server-event callback.
unsafe fn event_ctx(ctx: *mut raw::RedisModuleCtx) -> Option<Ctx> {
    Ctx::from_raw(ctx)
}

extern "C" fn on_flush(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    data: *mut c_void,
) {
    if sub != raw::REDISMODULE_SUBEVENT_FLUSHDB_START || data.is_null() {
        return;
    }
    guard::callback("the flush event", || {
        // SAFETY: Redis passes its FlushInfo for this event; `ctx` is the callback's.
        let (db, ctx) = unsafe {
            (
                (*data.cast::<raw::RedisModuleFlushInfoV1>()).dbnum,
                event_ctx(ctx),
            )
        };
        if let (Some(h), Some(ctx)) = (handlers(), ctx) {
            (h.flush)(&ctx, (db >= 0).then_some(db));
        }
    });
}

extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    _sub: u64,
    data: *mut c_void,
) {
    if data.is_null() {
        return;
    }
    guard::callback("the swapdb event", || {
        // SAFETY: Redis passes its SwapDbInfo for this event.
        let info = unsafe { &*data.cast::<raw::RedisModuleSwapDbInfoV1>() };
        if let Some(h) = handlers() {
            (h.swapdb)(info.dbnum_first, info.dbnum_second);
        }
    });
}

extern "C" fn on_role(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _data: *mut c_void,
) {
    guard::callback("the role-change event", || {
        // SAFETY: the callback's context.
        if let (Some(h), Some(ctx)) = (handlers(), unsafe { event_ctx(ctx) }) {
            (h.role)(
                &ctx,
                sub == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER,
            );
        }
    });
}

extern "C" fn on_cron(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    _sub: u64,
    data: *mut c_void,
) {
    guard::callback("the cron event", || {
        let hz = if data.is_null() {
            10
        } else {
            // SAFETY: Redis passes its RedisModuleCronLoopInfo (version 1) for this event.
            unsafe { (*data.cast::<raw::RedisModuleCronLoopInfo>()).hz }
        };
        // SAFETY: the callback's context.
        if let (Some(h), Some(ctx)) = (handlers(), unsafe { event_ctx(ctx) }) {
            (h.cron)(&ctx, hz);
        }
    });
}

extern "C" fn on_turn(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    _sub: u64,
    _data: *mut c_void,
) {
    guard::callback("the event loop event", || {
        // SAFETY: the callback's context.
        if let (Some(h), Some(ctx)) = (handlers(), unsafe { event_ctx(ctx) }) {
            (h.turn)(&ctx);
        }
    });
}

extern "C" fn on_fork(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _data: *mut c_void,
) {
    if sub != raw::REDISMODULE_SUBEVENT_FORK_CHILD_BORN {
        return;
    }
    guard::callback("the fork event", || {
        // SAFETY: the callback's context.
        if let (Some(h), Some(ctx)) = (handlers(), unsafe { event_ctx(ctx) }) {
            (h.forked)(&ctx);
        }
    });
}

/// The server's wall clock in µs since the epoch (`RedisModule_Microseconds`, Redis 7.2+ and
/// Valkey), if it has one.
pub fn wall_clock() -> Option<fn() -> u64> {
    super::api_opt!(RedisModule_Microseconds)?;
    Some(|| match super::api_opt!(RedisModule_Microseconds) {
        // SAFETY: a plain function of the server, with no arguments.
        Some(f) => (unsafe { f() }) as u64,
        None => 0,
    })
}

/// The server's monotonic clock in ms (`RedisModule_MonotonicMicroseconds`): local durations
/// (the stall check, waits) must not follow steps of the wall clock.
pub fn monotonic_ms() -> u64 {
    monotonic().0
}

/// The monotonic clock in whole ms (rounded down) and whether it is a fraction of a ms past
/// them (a wait deadline then rounds up, so no wait ends early).
pub fn monotonic() -> (u64, bool) {
    let us = match super::api_opt!(RedisModule_MonotonicMicroseconds) {
        // SAFETY: a plain function of the server, with no arguments.
        Some(f) => unsafe { f() },
        None => {
            static START: OnceLock<std::time::Instant> = OnceLock::new();
            let start = START.get_or_init(std::time::Instant::now);
            start.elapsed().as_micros() as u64 + 1000
        }
    };
    (us / 1000, us % 1000 != 0)
}

extern "C" fn on_loading(
    ctx: *mut raw::RedisModuleCtx,
    _e: raw::RedisModuleEvent,
    sub: u64,
    _data: *mut c_void,
) {
    let what = match sub {
        raw::REDISMODULE_SUBEVENT_LOADING_ENDED => Loading::Ended,
        raw::REDISMODULE_SUBEVENT_LOADING_FAILED => Loading::Failed,
        _ => Loading::Started,
    };
    guard::callback("the loading event", || {
        // SAFETY: the callback's context.
        if let (Some(h), Some(ctx)) = (handlers(), unsafe { event_ctx(ctx) }) {
            (h.loading)(&ctx, what);
        }
    });
}

extern "C" fn on_keyspace(
    ctx: *mut raw::RedisModuleCtx,
    kind: c_int,
    event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    guard::callback("a keyspace event", || {
        // SAFETY: Redis passes the callback's context, a NUL-terminated event name and the
        // key's name, all valid for the call.
        let (ctx, event, key) = unsafe {
            (
                event_ctx(ctx),
                (!event.is_null()).then(|| std::ffi::CStr::from_ptr(event)),
                RStr::from_raw(key),
            )
        };
        let (Some(h), Some(ctx), Some(event), Some(key)) = (handlers(), ctx, event, key) else {
            return;
        };
        if kind & raw::REDISMODULE_NOTIFY_EVICTED as c_int != 0 {
            (h.evicted)(&ctx, key);
        } else {
            (h.generic)(&ctx, event.to_bytes(), key);
        }
    });
    raw::REDISMODULE_OK as c_int
}
