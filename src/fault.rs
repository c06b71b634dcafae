//! Test-only fault injection (the `fault-injection` feature): `LEASE.FAULT point` makes the
//! entry point named `point` (a data-type callback such as `rdb_save`, `the timer`, `INFO`,
//! `a blocked client's reply`, or `command rwlock.info` for a command) panic on its next runs, to prove that every entry
//! from Redis runs under the panic guard; `LEASE.FAULT CLEAR` disarms them all.

use std::collections::BTreeSet;
use std::sync::Mutex;

use crate::commands::Outcome;
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::reply::Reply;

static ARMED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

pub fn armed(what: &str) -> bool {
    ARMED.lock().is_ok_and(|a| a.contains(what))
}

/// `LEASE.FAULT point|CLEAR`
pub fn command(_ctx: &Ctx, args: &Args) -> Outcome {
    let point = String::from_utf8_lossy(args.bytes(1)).into_owned();
    if let Ok(mut a) = ARMED.lock() {
        if point.eq_ignore_ascii_case("CLEAR") {
            a.clear();
        } else {
            a.insert(point);
        }
    }
    Ok(Reply::Ok)
}
