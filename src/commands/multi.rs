//! `RWLOCK.MLOCK`, `RWLOCK.MUNLOCK`, `RWLOCK.MRENEW`: several keys at once, all or nothing
//! (the rules are the core's `multi`), and the grants of parked multi-key requests ([`drain`]).

use redis_lease_core::multi::Ready;
use redis_lease_core::multi::{grant_ready, mlock as core_mlock, mrenew as core_mrenew};
use redis_lease_core::multi::{munlock as core_munlock, MultiAcquire, MultiError, MultiRequest};
use redis_lease_core::{Changes, Env, Grants, Id, Kind, LockError, Mode, RwLock, Wait};

use super::{deadlock, held_id, new_id, new_wait, opts, refused, token, ttl, writable, Outcome};
use crate::commit::{decide_many, Open, Origin};
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, WRONGTYPE};
use crate::ffi::replicate::Owner;
use crate::ffi::reply::{Reply, ReplyError};
use crate::ffi::string::{RStr, RString};
use crate::registry::Group;
use crate::{config, parse, slot, state, waiters, waitgraph};

/// The keys (`numkeys` at argument 1, the keys after it, each once) and the position of the
/// first argument after them. `after`: how many fixed arguments must follow the keys.
fn keys<'a>(
    ctx: &Ctx,
    args: &Args<'a>,
    after: usize,
) -> Result<(Vec<RStr<'a>>, usize), ReplyError> {
    let available = args.len().saturating_sub(2 + after);
    let n = parse::numkeys(args.bytes(1), available).map_err(ReplyError::from)?;
    let names: Vec<RStr> = (2..2 + n).filter_map(|i| args.get(i)).collect();
    if ctx.is_cluster() {
        let first = slot::of(names[0].bytes());
        if names.iter().any(|k| slot::of(k.bytes()) != first) {
            return Err("CROSSSLOT the keys must hash to one slot (use a hash tag: \
                        {acct}:1 and {acct}:2)"
                .into());
        }
    }
    let mut sorted: Vec<&[u8]> = names.iter().map(|k| k.bytes()).collect();
    sorted.sort_unstable();
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err("ERR a key is named more than once; each key must be distinct".into());
    }
    Ok((names, 2 + n))
}

fn origin<'a>(args: &Args<'a>, i: usize, id: &'a Id) -> Origin<'a> {
    Origin::Here {
        owner: args.get(i).map(|arg| Owner { arg, id }),
        own: false,
    }
}

/// Opens every key for writing (in the selected db).
fn open_all<'a>(ctx: &'a Ctx, names: &[RStr<'a>]) -> Result<Vec<Key<'a>>, ReplyError> {
    names
        .iter()
        .map(|n| {
            Key::open(ctx, *n, Access::Write)
                .ok_or_else(|| ReplyError::from("ERR could not open the key"))
        })
        .collect()
}

/// `RWLOCK.MLOCK numkeys key [key ...] owner ttl [READ] [WAIT ms] [MAXHOLD ms]`: an array of
/// tokens (one per key, in order) or nil.
pub fn mlock(ctx: &Ctx, args: &Args) -> Outcome {
    writable(ctx)?;
    let (names, at) = keys(ctx, args, 2)?;
    let owner = new_id(args, at, "owner")?;
    let ttl = ttl(args, at + 1)?;
    let (read, o) = parse::multi_options(&args.rest(at + 2)).map_err(ReplyError::from)?;
    let o = opts(ctx, o);
    let mode = if read { Mode::Read } else { Mode::Write };
    let db = ctx.db();
    let wait = o.wait.map(new_wait);
    let req = MultiRequest {
        owner: &owner,
        mode,
        ttl,
        wait,
        max_waiters: config::max_waiters(),
        max_hold: o.max_hold,
    };
    let keys = open_all(ctx, &names)?;
    let result = decide_many(
        keys,
        Open::Create,
        origin(args, at, &owner),
        |values, grants, env| {
            let (mut changes, mut result) = {
                let mut locks: Vec<&mut RwLock> = values.iter_mut().map(|v| &mut v.core).collect();
                core_mlock(&mut locks, grants, &req, env)
            };
            if let (Ok(MultiAcquire::Queued), Some(w)) = (&result, wait) {
                let open: Vec<_> = values
                    .iter()
                    .map(|v| (v.slot, Kind::RwLock, &v.core.0))
                    .collect();
                let cycle = waitgraph::deadlocks(ctx, &owner, w.id, &open, env.now);
                drop(open);
                if cycle {
                    for (v, c) in values.iter_mut().zip(changes.iter_mut()) {
                        c.append(v.core.cancel(w.id, env).0);
                    }
                    result = Err(MultiError {
                        key: 0,
                        error: LockError::Deadlock,
                    });
                } else {
                    let first = values[0].slot;
                    let more: Vec<_> = values[1..].iter().map(|v| v.slot).collect();
                    waiters::park(ctx, w.id, &owner, first, more);
                    let g = Group {
                        db,
                        names: names.iter().map(|n| Box::from(n.bytes())).collect(),
                        owner: owner.clone(),
                        mode,
                        ttl,
                        max_hold: o.max_hold,
                        until: w.until,
                    };
                    state::with(move |s| s.waiters.add_group(w.id, g));
                }
            }
            (changes, result)
        },
    )
    .map_err(|_| ReplyError::from(WRONGTYPE))?;
    drain(ctx);
    match result {
        Ok(MultiAcquire::Granted(tokens)) => {
            ctx.reply_array(tokens.len());
            for t in tokens {
                ctx.reply(token(t));
            }
            Ok(Reply::Written)
        }
        Ok(MultiAcquire::Busy) => Ok(Reply::Nil),
        Ok(MultiAcquire::Queued) => Ok(Reply::Parked),
        Err(e) if e.error == LockError::Deadlock => Err(deadlock()),
        Err(e) => Err(refused_at(e).into()),
    }
}

/// A refusal's text, naming the key that refused (`(key n)`, counted from 1).
fn refused_at(e: MultiError) -> String {
    let ReplyError(text) = refused(e.error);
    format!("{text} (key {})", e.key + 1)
}

/// Runs a multi-key change of `owner`'s holds on the existing keys.
fn change_all<T>(
    ctx: &Ctx,
    args: &Args,
    names: &[RStr],
    at: usize,
    owner: &Id,
    op: impl FnOnce(&mut [&mut RwLock], &[Grants], &mut Env) -> (Vec<Changes>, T),
) -> Result<T, ReplyError> {
    let keys = open_all(ctx, names)?;
    let out = decide_many(
        keys,
        Open::Existing,
        origin(args, at, owner),
        |values, grants, env| {
            let mut locks: Vec<&mut RwLock> = values.iter_mut().map(|v| &mut v.core).collect();
            op(&mut locks, grants, env)
        },
    )
    .map_err(|_| ReplyError::from(WRONGTYPE))?;
    drain(ctx);
    Ok(out)
}

/// `RWLOCK.MUNLOCK numkeys key [key ...] owner`: how many keys had a hold of owner released.
pub fn munlock(ctx: &Ctx, args: &Args) -> Outcome {
    writable(ctx)?;
    let (names, at) = keys(ctx, args, 1)?;
    if args.len() != at + 1 {
        return Err("ERR wrong number of arguments for 'rwlock.munlock' command".into());
    }
    let owner = held_id(args, at, "owner")?;
    let n = change_all(ctx, args, &names, at, &owner, |locks, grants, env| {
        core_munlock(locks, grants, &owner, env)
    })?;
    Ok(Reply::Int(n as i64))
}

/// `RWLOCK.MRENEW numkeys key [key ...] owner ttl`: how many keys had owner's holds renewed;
/// MAXHOLD (nothing renewed) if that would pass a hold's cap.
pub fn mrenew(ctx: &Ctx, args: &Args) -> Outcome {
    writable(ctx)?;
    let (names, at) = keys(ctx, args, 2)?;
    if args.len() != at + 2 {
        return Err("ERR wrong number of arguments for 'rwlock.mrenew' command".into());
    }
    let owner = held_id(args, at, "owner")?;
    let ttl = ttl(args, at + 1)?;
    let n = change_all(ctx, args, &names, at, &owner, |locks, grants, env| {
        core_mrenew(locks, grants, &owner, ttl, env)
    })?;
    Ok(Reply::Int(n.map_err(refused)? as i64))
}

/// Grants every parked multi-key request some key reported ready that can be granted now.
/// Called by entry points once their own keys are committed (closed).
#[inline]
pub fn drain(ctx: &Ctx) {
    // The common case (nothing ready) costs one load, inlined at each entry point.
    if state::ready_pending() {
        drain_ready(ctx);
    }
}

#[inline(never)]
fn drain_ready(ctx: &Ctx) {
    let Some(mut id) = state::with(|s| s.waiters.pop_ready()) else {
        state::set_ready(false);
        return;
    };
    let db = ctx.db();
    // Bounded: each round takes one id off the list, and only a key that changed puts one
    // back.
    for _ in 0..100_000 {
        if let Some(g) = state::with(move |s| s.waiters.group(id).cloned()) {
            try_grant(ctx, id, &g);
        }
        match state::with(|s| s.waiters.pop_ready()) {
            Some(next) => id = next,
            None => {
                state::set_ready(false);
                break;
            }
        }
    }
    ctx.select_db(db);
}

fn try_grant(ctx: &Ctx, id: u64, g: &Group) {
    if !waiters::alive(id) || !ctx.select_db(g.db) {
        return;
    }
    let names: Vec<RString> = g.names.iter().map(|n| RString::from_bytes(n)).collect();
    let rnames: Vec<RStr> = names.iter().map(|n| n.as_str()).collect();
    let Ok(keys) = open_all(ctx, &rnames) else {
        return;
    };
    let req = MultiRequest {
        owner: &g.owner,
        mode: g.mode,
        ttl: g.ttl,
        wait: Some(Wait { id, until: g.until }),
        max_waiters: usize::MAX,
        max_hold: g.max_hold,
    };
    let origin = Origin::Here {
        owner: None,
        own: false,
    };
    // Every key made if missing: a key the owner held and let go meanwhile (or a free key
    // that went back to the lobby) gets the request queued there again, in its place.
    let ready = decide_many(keys, Open::Create, origin, |values, grants, env| {
        let mut locks: Vec<&mut RwLock> = values.iter_mut().map(|v| &mut v.core).collect();
        grant_ready(&mut locks, grants, &req, env)
    });
    match ready {
        Ok(Ready::Granted(tokens)) => {
            waiters::answer(id, waiters::Answer::Tokens(tokens));
        }
        Ok(Ready::Refused(e)) => {
            let text = refused_at(e);
            waiters::answer(id, waiters::Answer::Refused(text));
        }
        Ok(Ready::NotYet) => state::with(move |s| s.waiters.unready(id)),
        Err(_) => {
            // One of its keys became a key of another kind: it can never be granted there.
            waiters::answer(id, waiters::Answer::WrongType);
        }
    }
}
