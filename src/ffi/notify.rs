//! Keyspace notifications of the module class.

use std::ffi::CStr;

use redis_module::raw;

use super::api;
use super::ctx::Ctx;
use super::string::RStr;

/// Announces `event` on `key` (seen with `notify-keyspace-events` including `d`).
pub fn keyspace(ctx: &Ctx, event: &CStr, key: RStr) {
    // SAFETY: a live context, a NUL-terminated literal and a live key string.
    unsafe {
        api!(RedisModule_NotifyKeyspaceEvent)(
            ctx.raw(),
            raw::REDISMODULE_NOTIFY_MODULE,
            event.as_ptr(),
            key.raw(),
        );
    }
}
