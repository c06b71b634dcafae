//! `LEASE.EXEC key token command [arg ...]`: a write fenced inside Redis. `command` runs only
//! while the hold with `token` is live on `key` (the write hold of an RWLOCK, the leadership of
//! a LEADER key, any hold of a SEMAPHORE), atomically with the check, as the calling user;
//! otherwise the reply is an error starting with FENCED and nothing runs.

use redis_lease_core::{Election, RwLock, Semaphore};

use super::Outcome;
use crate::clock;
use crate::ffi::args::Args;
use crate::ffi::call::{self, CallError};
use crate::ffi::ctx::Ctx;
use crate::ffi::getkeys::{self, KeyFlags};
use crate::ffi::key::{Access, Key, Typed, WRONGTYPE};
use crate::ffi::reply::{Reply, ReplyError};
use crate::parse;
use crate::slot;
use crate::text::quoted;
use crate::value::{Saved, Stored};

/// Commands that may wait (a fenced write must not), matched on the lowercase name.
const BLOCKING: &[&[u8]] = &[
    b"blpop",
    b"brpop",
    b"brpoplpush",
    b"blmove",
    b"blmpop",
    b"bzpopmin",
    b"bzpopmax",
    b"bzmpop",
    b"wait",
    b"waitaof",
];

/// Why `name args...` may not run inside LEASE.EXEC, if it may not.
fn refused(name: &[u8], args: &[&[u8]]) -> Option<&'static str> {
    let own = [&b"rwlock."[..], b"leader.", b"semaphore.", b"lease."];
    if own.iter().any(|p| name.starts_with(p)) {
        return Some("the module's own commands");
    }
    let blocks = BLOCKING.contains(&name)
        || ((name == b"xread" || name == b"xreadgroup")
            && args.iter().any(|a| a.eq_ignore_ascii_case(b"BLOCK")));
    if blocks {
        return Some("blocking commands");
    }
    // MULTI/EXEC, scripts and functions are refused by Redis itself (script mode).
    None
}

/// Whether the hold with `token` is live on the value, and may fence writes.
trait Fences {
    fn fences(&self, token: u64, now: u64) -> Result<(), &'static str>;
}

impl Fences for Stored<RwLock> {
    fn fences(&self, token: u64, now: u64) -> Result<(), &'static str> {
        match self
            .core
            .0
            .live_holders(now)
            .find(|h| h.hold.token == token)
        {
            Some(h) if h.hold.writes > 0 => Ok(()),
            Some(_) => Err("is a read hold: only the write hold fences writes"),
            None => Err("is not live on this key"),
        }
    }
}

impl Fences for Stored<Election> {
    fn fences(&self, token: u64, now: u64) -> Result<(), &'static str> {
        match self.core.current(now) {
            Some(h) if h.hold.token == token => Ok(()),
            _ => Err("is not the current term of this election"),
        }
    }
}

impl Fences for Stored<Semaphore> {
    fn fences(&self, token: u64, now: u64) -> Result<(), &'static str> {
        let live = self.core.0.live_holders(now).any(|h| h.hold.token == token);
        live.then_some(()).ok_or("is not live on this key")
    }
}

fn check<K: Saved>(key: &Key, token: u64, now: u64) -> Option<Result<(), &'static str>>
where
    Stored<K>: Typed + Fences,
{
    key.peek::<Stored<K>>()
        .ok()
        .flatten()
        .map(|v| v.fences(token, now))
}

/// Declares LEASE.EXEC's keys (its getkeys-api): the lock key, read only, and the keys of the
/// command it runs, with their own flags, at their positions in LEASE.EXEC's arguments. Redis
/// then routes and checks them all: CROSSSLOT when they hash to different slots, TRYAGAIN (or
/// ASK) while a migrating slot has some of them on each node, ACL key patterns on each.
fn declare_keys(ctx: &Ctx, args: &Args) {
    ctx.declare_key(1, KeyFlags::READ);
    let inner = args.raw_from(3);
    for (pos, flags) in getkeys::command_keys(ctx, inner).unwrap_or_default() {
        if pos < inner.len() {
            ctx.declare_key(3 + pos, flags);
        }
    }
}

pub fn exec(ctx: &Ctx, args: &Args) -> Outcome {
    if ctx.keys_request() {
        declare_keys(ctx, args);
        return Ok(Reply::Written);
    }
    // A writable replica (`replica-read-only no`) must not run fenced writes its master never
    // sees: it would diverge.
    super::writable(ctx)?;
    let t = match parse::integer(args.bytes(2)) {
        Some(t) if t >= 1 => t as u64,
        _ => {
            return Err(format!(
                "ERR token must be an integer >= 1, got '{}'",
                quoted(args.bytes(2))
            )
            .into())
        }
    };
    let name = args.bytes(3).to_ascii_lowercase();
    let rest = args.rest(4);
    if let Some(what) = refused(&name, &rest) {
        return Err(format!(
            "ERR LEASE.EXEC cannot run '{}': {what} are refused inside it",
            quoted(&name)
        )
        .into());
    }
    let lock_key = args.bytes(1);
    if ctx.is_cluster() {
        let lock_slot = slot::of(lock_key);
        let inner = args.raw_from(3);
        for (pos, _) in getkeys::command_keys(ctx, inner).unwrap_or_default() {
            let k = inner.get(pos).map_or(&[][..], |s| call::bytes_of(*s));
            if slot::of(k) != lock_slot {
                return Err(
                    "CROSSSLOT the command's keys must hash to the lock key's slot \
                            (use a hash tag: {order:42} and {order:42}:data)"
                        .into(),
                );
            }
        }
    }
    let now = clock::now_ms();
    let key = args.get(1).and_then(|n| Key::open(ctx, n, Access::Read));
    let verdict = key.as_ref().and_then(|k| {
        check::<RwLock>(k, t, now)
            .or_else(|| check::<Election>(k, t, now))
            .or_else(|| check::<Semaphore>(k, t, now))
    });
    match verdict {
        Some(Ok(())) => {}
        Some(Err(why)) => return Err(format!("FENCED token {t} {why}").into()),
        None if key.as_ref().is_some_and(|k| !k.is_empty()) => return Err(WRONGTYPE.into()),
        None => return Err(format!("FENCED token {t}: the key holds nothing").into()),
    }
    drop(key);
    match call::run_as_caller(ctx, &name, args.raw_from(4)) {
        Ok(reply) => {
            ctx.reply_call(&reply);
            Ok(Reply::Written)
        }
        Err(CallError::UnknownCommand) => {
            Err(format!("ERR unknown command '{}' inside LEASE.EXEC", quoted(&name)).into())
        }
        Err(CallError::Refused(errno)) => Err(ReplyError::from(format!(
            "ERR LEASE.EXEC could not run '{}' (errno {errno}: wrong arity, or refused here)",
            quoted(&name)
        ))),
    }
}
