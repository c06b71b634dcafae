//! `INFO lease`: what the module holds and has done since it was loaded. Redis prefixes every
//! field with `lease_`.

use std::ffi::CString;

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
    let ints: [(&str, i64); 19] = [
        ("keys", state::keys()),
        ("holders", state::holders()),
        ("waiters", waiting as i64),
        ("grants_read", s.grants_read as i64),
        ("grants_write", s.grants_write as i64),
        ("grants_leader", s.grants_leader as i64),
        ("releases", s.releases as i64),
        ("renewals", s.renewals as i64),
        ("lapses", s.lapses as i64),
        ("resignations", s.resignations as i64),
        ("waits", s.waits as i64),
        ("wait_timeouts", s.wait_timeouts as i64),
        ("waiters_lockgone", s.waiters_lockgone as i64),
        ("waiters_left", s.waiters_left as i64),
        ("handoffs", s.handoffs as i64),
        ("wait_ms_total", s.wait_ms_total as i64),
        ("wait_ms_max", s.wait_ms_max as i64),
        ("token_high_water", high.min(i64::MAX as u64) as i64),
        ("scheduled_wakeups", wakeups as i64),
    ];
    unsafe {
        let section = CString::new("").expect("no nul");
        raw::RedisModule_InfoAddSection.unwrap()(ctx, section.as_ptr());
        for (name, value) in ints {
            let name = CString::new(name).expect("no nul");
            raw::RedisModule_InfoAddFieldLongLong.unwrap()(ctx, name.as_ptr(), value);
        }
        let name = CString::new("wait_ms_avg").expect("no nul");
        raw::RedisModule_InfoAddFieldDouble.unwrap()(ctx, name.as_ptr(), avg);
    }
}
