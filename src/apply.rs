//! `LEASE.APPLY key kind op...`: the effects a master decided, as replicas and the AOF see
//! them (the format is in `crate::wire`). Deterministic: absolute deadlines and tokens,
//! applied without reading the clock or the queue. Accepted only from a master's
//! replication stream or while loading the AOF.

use redis_lease_core::{Changes, Election, RwLock, Semaphore};

use crate::commands::Outcome;
use crate::commit::{commit, ensure_slot, Origin};
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, Typed, WRONGTYPE};
use crate::ffi::replicate;
use crate::ffi::reply::{Reply, ReplyError};
use crate::value::{Saved, Stored};
use crate::wire::{self, Op};
use crate::{state, validate};

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
    let mut key = Key::open(ctx, name, Access::Write)
        .ok_or(ReplyError::from("ERR could not open the key"))?;
    let (v, created) = key
        .value_or_create::<Stored<K>>(Stored::default)
        .map_err(|_| ReplyError::from(WRONGTYPE))?;
    if created {
        state::count_key(1);
    }
    ensure_slot(v, ctx.db(), name.bytes());
    let before = v.core.lock().holder_count();
    let mut effects = Vec::new();
    let mut tokens = state::with(|s| s.tokens);
    let lock = v.core.lock_mut();
    for op in ops {
        match op {
            Op::Effect(e) => {
                lock.apply(&e, &mut tokens);
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
        }
    }
    state::with(move |s| s.tokens = tokens);
    let changes = Changes {
        effects: effects.into(),
        ..Changes::default()
    };
    commit::<K>(key, before, changes, Origin::Replayed);
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
    let ops = wire::parse_ops(&args.rest(3)).map_err(ReplyError::from)?;
    match wire::kind(args.bytes(2)) {
        Some(redis_lease_core::Kind::RwLock) => apply_to::<RwLock>(ctx, args, ops),
        Some(redis_lease_core::Kind::Election) => apply_to::<Election>(ctx, args, ops),
        Some(redis_lease_core::Kind::Semaphore) => apply_to::<Semaphore>(ctx, args, ops),
        None => Err("ERR LEASE.APPLY: kind must be rwlock, leader or semaphore".into()),
    }
}
