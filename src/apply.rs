//! `LEASE.APPLY key kind op...`: the effects a master decided, as replicas and the AOF see
//! them (the format is in `crate::wire`). Deterministic: absolute deadlines and tokens,
//! applied without reading the clock or the queue. Accepted only from a master's
//! replication stream or while loading the AOF.

use redis_lease_core::{Changes, Election, RwLock, Semaphore};

use crate::commands::Outcome;
use crate::commit::{replay, Open};
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, Typed, WRONGTYPE};
use crate::ffi::replicate;
use crate::ffi::reply::{Reply, ReplyError};
use crate::value::{Saved, Stored};
use crate::wire::{self, Op};
use crate::{holdback, state, validate};

fn apply_to<K: Saved>(ctx: &Ctx, args: &Args, ops: Vec<Op>) -> Outcome
where
    Stored<K>: Typed,
{
    for op in &ops {
        if let Op::Hold(owner, hold) = op {
            validate::hold(K::KIND, owner, hold)
                .map_err(|e| ReplyError::from(format!("ERR LEASE.APPLY: {e}")))?;
        }
    }
    let name = args.get(1).ok_or(ReplyError::from("ERR missing key"))?;
    let key = Key::open(ctx, name, Access::Write)
        .ok_or(ReplyError::from("ERR could not open the key"))?;
    replay::<K, _>(key, Open::Create, |core, tokens| {
        let mut effects = Vec::new();
        let lock = core.lock_mut();
        for op in ops {
            match op {
                Op::Effect(e) => {
                    lock.apply(&e, tokens);
                    effects.push(e);
                }
                Op::Hold(owner, hold) => {
                    tokens.observe(hold.token);
                    lock.restore(&owner, hold);
                }
                Op::Last(t) => {
                    tokens.observe(t);
                    lock.observe_token(t);
                }
                Op::High(t) => tokens.observe(t),
                Op::Evicted(_) => {}
            }
        }
        let changes = Changes {
            effects: effects.into(),
            ..Changes::default()
        };
        (changes, ())
    })
    .map_err(|_| ReplyError::from(WRONGTYPE))?;
    // Feed this server's own AOF (a replica's sub-replicas get the master's stream as is).
    replicate::verbatim(ctx);
    Ok(Reply::Ok)
}

/// `LEASE.APPLY key kind op...`
pub fn apply(ctx: &Ctx, args: &Args) -> Outcome {
    if !ctx.replicated() {
        return Err(
            "ERR LEASE.APPLY is internal: it is accepted only from a master or an AOF file".into(),
        );
    }
    let mut ops = wire::parse_ops(&args.rest(3)).map_err(ReplyError::from)?;
    if wire::kind(args.bytes(2)).is_none() {
        return Err("ERR LEASE.APPLY: kind must be rwlock, leader or semaphore".into());
    }
    // An eviction record is about the name, not a key: it makes none.
    let (db, name) = (ctx.db(), args.bytes(1));
    ops.retain(|op| match op {
        Op::Evicted(until) => {
            holdback::evicted(db, name, *until, false);
            false
        }
        // The server-wide mark is no key's either.
        Op::High(t) => {
            let t = *t;
            state::with(move |s| s.tokens.observe(t));
            false
        }
        _ => true,
    });
    if ops.is_empty() {
        replicate::verbatim(ctx);
        return Ok(Reply::Ok);
    }
    match wire::kind(args.bytes(2)) {
        Some(redis_lease_core::Kind::RwLock) => apply_to::<RwLock>(ctx, args, ops),
        Some(redis_lease_core::Kind::Election) => apply_to::<Election>(ctx, args, ops),
        Some(redis_lease_core::Kind::Semaphore) => apply_to::<Semaphore>(ctx, args, ops),
        None => Err("ERR LEASE.APPLY: kind must be rwlock, leader or semaphore".into()),
    }
}
