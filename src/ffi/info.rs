//! The module's `INFO` section.

use std::ffi::CStr;

use redis_module::raw;

use super::{api, guard};

/// Writes fields into the `INFO lease` section.
pub struct Section {
    raw: *mut raw::RedisModuleInfoCtx,
}

impl Section {
    pub fn int(&mut self, name: &CStr, v: i64) {
        // SAFETY: the info context of the running INFO callback.
        unsafe { api!(RedisModule_InfoAddFieldLongLong)(self.raw, name.as_ptr(), v) };
    }

    /// A field `name:k1=v1,k2=v2` (Redis's dict field: `name` is prefixed, the keys are not).
    pub fn dict(&mut self, name: &CStr, fields: &[(&CStr, i64)]) {
        // SAFETY: as above; each begin is matched by its end before the callback returns.
        unsafe { api!(RedisModule_InfoBeginDictField)(self.raw, name.as_ptr()) };
        for (k, v) in fields {
            self.int(k, *v);
        }
        // SAFETY: as above.
        unsafe { api!(RedisModule_InfoEndDictField)(self.raw) };
    }

    pub fn text(&mut self, name: &CStr, v: &CStr) {
        // SAFETY: as above; Redis copies the value.
        unsafe { api!(RedisModule_InfoAddFieldCString)(self.raw, name.as_ptr(), v.as_ptr()) };
    }

    pub fn float(&mut self, name: &CStr, v: f64) {
        // SAFETY: as above.
        unsafe { api!(RedisModule_InfoAddFieldDouble)(self.raw, name.as_ptr(), v) };
    }
}

/// Registers `write` as the module's INFO callback (it fills the one section, whose fields
/// Redis prefixes with `lease_`).
pub fn register(ctx: &super::ctx::Ctx, write: fn(&mut Section)) {
    let _ = WRITE.set(write);
    // SAFETY: called while the module loads; the callback is a plain function.
    unsafe { api!(RedisModule_RegisterInfoFunc)(ctx.raw(), Some(on_info)) };
}

static WRITE: std::sync::OnceLock<fn(&mut Section)> = std::sync::OnceLock::new();

extern "C" fn on_info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    guard::callback("INFO", || {
        let Some(write) = WRITE.get() else {
            return;
        };
        // SAFETY: the info context Redis passed; an empty name is the module's own section.
        unsafe { api!(RedisModule_InfoAddSection)(ctx, c"".as_ptr()) };
        write(&mut Section { raw: ctx });
    });
}
