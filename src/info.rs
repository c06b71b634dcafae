//! `INFO lease`: what the module holds and has done since it was loaded. Redis prefixes every
//! field with `lease_`.

use std::ffi::CStr;

use crate::clock::now_ms;
use crate::ffi::info::Section;
use crate::histogram::{Histogram, LABELS};
use crate::num::saturating_i64;
use crate::{holdback, state};

pub fn write(out: &mut Section) {
    let now = now_ms();
    let (s, waits, holds, waiting, high, keys, scheduled, index_bytes) = state::with(|s| {
        (
            s.stats,
            s.wait_times,
            s.hold_times,
            s.waiters.len(),
            s.tokens.high_water(),
            s.index.len(),
            s.index.scheduled(),
            s.index.heap_bytes(),
        )
    });
    let avg = if s.handoffs > 0 {
        s.wait_ms_total as f64 / s.handoffs as f64
    } else {
        0.0
    };
    let ints: [(&CStr, u64); 32] = [
        (c"keys", state::keys().max(0) as u64),
        (c"holders", state::holders().max(0) as u64),
        (c"waiters", waiting as u64),
        (c"grants_read", s.grants_read),
        (c"grants_write", s.grants_write),
        (c"grants_leader", s.grants_leader),
        (c"grants_semaphore", s.grants_semaphore),
        (c"releases", s.releases),
        (c"renewals", s.renewals),
        (c"lapses", s.lapses),
        (c"resignations", s.resignations),
        (c"waits", s.waits),
        (c"wait_timeouts", s.wait_timeouts),
        (c"waiters_lockgone", s.waiters_lockgone),
        (c"waiters_left", s.waiters_left),
        (c"handoffs", s.handoffs),
        (c"wait_ms_total", s.wait_ms_total),
        (c"wait_ms_max", s.wait_ms_max),
        (c"token_high_water", high),
        (c"scheduled_wakeups", scheduled as u64),
        (c"timers", crate::ffi::timer::live()),
        (c"indexed_keys", keys as u64),
        (c"index_bytes", index_bytes as u64),
        (c"quarantine_ms", holdback::quarantine_left()),
        (c"lobby_waiters", holdback::waiting() as u64),
        (c"evictions", s.evictions),
        (c"stalls", s.stalls),
        (c"deadlocks", s.deadlocks),
        (c"floor_held_slots", crate::floor::held_slots() as u64),
        (c"floor_holds_ended", s.floor_holds_ended),
        (c"floor_holds_expired", s.floor_holds_expired),
        (
            c"evicted_holdbacks",
            state::with(move |s| s.evicted.values().filter(|e| e.until > now).count()) as u64,
        ),
    ];
    for (name, value) in ints {
        out.int(name, saturating_i64(value));
    }
    out.float(c"wait_ms_avg", avg);
    histogram(
        out,
        [c"wait_bucket_ms", c"wait_count", c"wait_sum_ms"],
        &waits,
    );
    histogram(
        out,
        [c"hold_bucket_ms", c"hold_count", c"hold_sum_ms"],
        &holds,
    );
    out.text(c"acl_categories", acl_categories());
    // 1 where the server skips the command lookup of RM_Replicate (Valkey 8.1+).
    out.int(
        c"skip_command_validation",
        i64::from(crate::ffi::server::skipping_command_validation()),
    );
}

/// `<name>_bucket_ms:1=N,...,inf=N` (cumulative, as Prometheus has it), `_count`, `_sum_ms`.
fn histogram(out: &mut Section, names: [&CStr; 3], h: &Histogram) {
    let counts = h.cumulative().map(saturating_i64);
    let fields: Vec<(&CStr, i64)> = LABELS.into_iter().zip(counts).collect();
    out.dict(names[0], &fields);
    out.int(names[1], saturating_i64(h.count()));
    out.int(names[2], saturating_i64(h.sum_ms()));
}

/// The ACL categories the module's commands are in on this server: `unavailable` (Redis
/// 7.0: grant them by name), `builtin` (@read, @write, ...; Redis 7.2), or `builtin,lease`
/// (with the module's own @lease; Redis 7.4+, Valkey 9).
fn acl_categories() -> &'static CStr {
    let acl = crate::ffi::command::acl_support();
    match (acl.categories, acl.module_category) {
        (false, _) => c"unavailable",
        (true, false) => c"builtin",
        (true, true) => c"builtin,lease",
    }
}
