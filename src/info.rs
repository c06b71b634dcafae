//! `INFO lease`: what the module holds and has done since it was loaded. Redis prefixes every
//! field with `lease_`.

use std::ffi::CStr;

use redis_module::{raw, Context};

use crate::state;

pub fn init(ctx: &Context) {
    unsafe {
        raw::RedisModule_RegisterInfoFunc.unwrap()(ctx.ctx, Some(on_info));
    }
}

extern "C" fn on_info(ctx: *mut raw::RedisModuleInfoCtx, _for_crash_report: i32) {
    let _ = crate::guard::quietly(|| write(ctx));
}

fn write(ctx: *mut raw::RedisModuleInfoCtx) {
    let (s, waiting, high, wakeups) = state::with(|s| {
        (
            s.stats,
            s.waiters.len(),
            s.tokens.high_water(),
            s.wakeups.len(),
        )
    });
    let avg = if s.handoffs > 0 {
        s.wait_ms_total as f64 / s.handoffs as f64
    } else {
        0.0
    };
    let ints: [(&CStr, i64); 19] = [
        (c"keys", state::keys()),
        (c"holders", state::holders()),
        (c"waiters", waiting as i64),
        (c"grants_read", s.grants_read as i64),
        (c"grants_write", s.grants_write as i64),
        (c"grants_leader", s.grants_leader as i64),
        (c"releases", s.releases as i64),
        (c"renewals", s.renewals as i64),
        (c"lapses", s.lapses as i64),
        (c"resignations", s.resignations as i64),
        (c"waits", s.waits as i64),
        (c"wait_timeouts", s.wait_timeouts as i64),
        (c"waiters_lockgone", s.waiters_lockgone as i64),
        (c"waiters_left", s.waiters_left as i64),
        (c"handoffs", s.handoffs as i64),
        (c"wait_ms_total", s.wait_ms_total as i64),
        (c"wait_ms_max", s.wait_ms_max as i64),
        (c"token_high_water", high.min(i64::MAX as u64) as i64),
        (c"scheduled_wakeups", wakeups as i64),
    ];
    unsafe {
        raw::RedisModule_InfoAddSection.unwrap()(ctx, c"".as_ptr());
        for (name, value) in ints {
            raw::RedisModule_InfoAddFieldLongLong.unwrap()(ctx, name.as_ptr(), value);
        }
        raw::RedisModule_InfoAddFieldDouble.unwrap()(ctx, c"wait_ms_avg".as_ptr(), avg);
    }
}
