//! A Redis module context: flags, the selected db, and log lines.

use std::ffi::CString;
use std::marker::PhantomData;
use std::ptr::NonNull;

use redis_module::raw;

use super::api;

/// A context Redis passed to a callback. Not `Send`: it belongs to the call it came with.
pub struct Ctx {
    raw: NonNull<raw::RedisModuleCtx>,
    _not_send: PhantomData<*mut ()>,
}

fn flag(bits: i32, f: u32) -> bool {
    bits & f as i32 != 0
}

impl Ctx {
    /// # Safety
    /// `ctx` must be the context of the running callback (or a detached context that lives
    /// as long as the module).
    pub unsafe fn from_raw(ctx: *mut raw::RedisModuleCtx) -> Option<Ctx> {
        NonNull::new(ctx).map(|raw| Ctx {
            raw,
            _not_send: PhantomData,
        })
    }

    pub fn raw(&self) -> *mut raw::RedisModuleCtx {
        self.raw.as_ptr()
    }

    fn flags(&self) -> i32 {
        // SAFETY: a live context.
        unsafe { api!(RedisModule_GetContextFlags)(self.raw()) }
    }

    /// This server is a master (not a replica).
    pub fn is_master(&self) -> bool {
        flag(self.flags(), raw::REDISMODULE_CTX_FLAGS_MASTER)
    }

    /// The command came from this server's master, or from the AOF being loaded (not from
    /// a client).
    pub fn replicated(&self) -> bool {
        let f = self.flags();
        flag(f, raw::REDISMODULE_CTX_FLAGS_REPLICATED)
            || flag(f, raw::REDISMODULE_CTX_FLAGS_LOADING)
    }

    /// A request may be parked: not inside MULTI/EXEC, a script, or a context that denies
    /// blocking.
    pub fn may_block(&self) -> bool {
        let f = self.flags();
        !(flag(f, raw::REDISMODULE_CTX_FLAGS_MULTI)
            || flag(f, raw::REDISMODULE_CTX_FLAGS_LUA)
            || flag(f, raw::REDISMODULE_CTX_FLAGS_DENY_BLOCKING))
    }

    /// The AOF is on.
    pub fn aof_on(&self) -> bool {
        flag(self.flags(), raw::REDISMODULE_CTX_FLAGS_AOF)
    }

    /// This server runs in Redis Cluster mode.
    pub fn is_cluster(&self) -> bool {
        flag(self.flags(), raw::REDISMODULE_CTX_FLAGS_CLUSTER)
    }

    /// Redis is loading its data (RDB or AOF).
    pub fn loading(&self) -> bool {
        flag(self.flags(), raw::REDISMODULE_CTX_FLAGS_LOADING)
    }

    /// The db the context has selected.
    pub fn db(&self) -> i32 {
        // SAFETY: a live context.
        unsafe { api!(RedisModule_GetSelectedDb)(self.raw()) }
    }

    /// Selects `db`; false if there is no such db.
    pub fn select_db(&self, db: i32) -> bool {
        // SAFETY: a live context; Redis checks the db number.
        unsafe { api!(RedisModule_SelectDb)(self.raw(), db) == raw::REDISMODULE_OK as i32 }
    }

    /// A log line at `verbose`. `msg` is ASCII from [`crate::text::escaped`]; a NUL would be
    /// a bug, and is dropped rather than reaching C.
    pub fn log_verbose(&self, msg: &str) {
        log(Some(self), c"verbose", msg);
    }
}

/// A log line at `level` ("verbose", "notice", "warning"), through `ctx` when there is one.
pub fn log(ctx: Option<&Ctx>, level: &std::ffi::CStr, msg: &str) {
    let Ok(line) = CString::new(msg.replace('\0', "")) else {
        return;
    };
    let ctx = ctx.map_or(std::ptr::null_mut(), Ctx::raw);
    // SAFETY: the format "%s" consumes exactly the one NUL-terminated string given; a null
    // context is allowed and logs under the module's name.
    unsafe { api!(RedisModule_Log)(ctx, level.as_ptr(), c"%s".as_ptr(), line.as_ptr()) }
}

pub fn log_warning(msg: &str) {
    log(None, c"warning", msg);
}

pub fn log_notice(msg: &str) {
    log(None, c"notice", msg);
}

impl Ctx {
    /// The context the crate's module registration passes to `init`.
    pub fn from_module(ctx: &redis_module::Context) -> Option<Ctx> {
        // SAFETY: the crate's Context wraps the live OnLoad context for this call.
        unsafe { Ctx::from_raw(ctx.ctx) }
    }
}
