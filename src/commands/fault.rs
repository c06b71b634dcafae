//! Test-only fault injection (the `fault-injection` feature): `LEASE.FAULT point` makes the
//! entry point named `point` (a data-type callback such as `rdb_save`, `the timer`, `INFO`,
//! `a blocked client's reply`, or `command rwlock.info` for a command) panic on its next runs,
//! to prove that every entry from Redis runs under the panic guard; `LEASE.FAULT CLEAR` disarms
//! them all.

use super::Outcome;
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::guard;
use crate::ffi::reply::Reply;

/// `LEASE.FAULT point|CLEAR`
pub fn fault(_ctx: &Ctx, args: &Args) -> Outcome {
    let point = String::from_utf8_lossy(args.bytes(1)).into_owned();
    guard::arm((!point.eq_ignore_ascii_case("CLEAR")).then_some(point));
    Ok(Reply::Ok)
}
