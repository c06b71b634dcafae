//! `RWLOCK.*`: read-write locks.

use redis_lease_core::{Effect, Mode, Request, RwLock};

use super::queue::{self, mode_word, Shape};
use super::{
    acquire, cap_left, change, held_id, ms_left, new_id, options, read, refused, replay_own, token,
    ttl, Outcome,
};
use crate::clock;
use crate::config;
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::reply::Reply;

fn lock(ctx: &Ctx, args: &Args, mode: Mode) -> Outcome {
    let owner = new_id(args, 2, "owner")?;
    let ttl = ttl(args, 3)?;
    let o = options(ctx, args, 4, None)?;
    acquire::<RwLock>(ctx, args, &owner, o.wait, |core, env, wait| {
        let req = Request {
            owner: &owner,
            mode,
            ttl,
            wait,
            max_waiters: config::max_waiters(),
            max_hold: o.max_hold,
        };
        core.lock(&req, env)
    })
}

/// `RWLOCK.RLOCK key owner ttl [WAIT ms] [MAXHOLD ms]`
pub fn rlock(ctx: &Ctx, args: &Args) -> Outcome {
    lock(ctx, args, Mode::Read)
}

/// `RWLOCK.WLOCK key owner ttl [WAIT ms] [MAXHOLD ms]`
pub fn wlock(ctx: &Ctx, args: &Args) -> Outcome {
    lock(ctx, args, Mode::Write)
}

/// `RWLOCK.UNLOCK key owner`
pub fn unlock(ctx: &Ctx, args: &Args) -> Outcome {
    let owner = held_id(args, 2, "owner")?;
    if ctx.replicated() {
        let release = Effect::Release { owner };
        return Ok(Reply::Int(replay_own::<RwLock>(ctx, args, release)?.into()));
    }
    let done = change::<RwLock, _>(ctx, args, &owner, false, true, |core, env| {
        core.unlock(&owner, env)
    })?;
    Ok(Reply::Int(done.into()))
}

/// `RWLOCK.RENEW key owner ttl`
pub fn renew(ctx: &Ctx, args: &Args) -> Outcome {
    let owner = held_id(args, 2, "owner")?;
    let ttl = ttl(args, 3)?;
    let t = change::<RwLock, _>(ctx, args, &owner, Ok(None), false, |core, env| {
        core.try_renew(&owner, ttl, env)
    })?;
    Ok(t.map_err(refused)?.map_or(Reply::Nil, token))
}

/// `RWLOCK.INFO key`: a map of `holders` (each a map of `cap`, `count`, `mode`, `owner`, `token`,
/// `ttl`, in grant order), `mode`, `queue` (see [`queue::reply`]), `token` and `waiters`.
pub fn info(ctx: &Ctx, args: &Args) -> Outcome {
    let (now, fraction) = clock::now();
    read::<RwLock, _>(ctx, args, |seen| {
        let waiting = queue::of(ctx, args.bytes(1), &seen);
        let lock = seen.value.map(|v| &v.core.0);
        let mut live: Vec<_> = lock.into_iter().flat_map(|l| l.live_holders(now)).collect();
        live.sort_unstable_by_key(|h| h.hold.token);
        let entries: Vec<(Mode, u32, _)> = live
            .iter()
            .flat_map(|h| {
                [
                    (Mode::Write, h.hold.writes, *h),
                    (Mode::Read, h.hold.reads, *h),
                ]
                .into_iter()
                .filter(|(_, c, _)| *c > 0)
            })
            .collect();
        ctx.reply_map(5);
        ctx.reply_bulk(b"holders");
        ctx.reply_array(entries.len());
        for (m, count, h) in entries {
            ctx.reply_map(6);
            ctx.reply_bulk(b"cap");
            ctx.reply_int(cap_left(h.hold.cap, now, fraction));
            ctx.reply_bulk(b"count");
            ctx.reply_int(count.into());
            ctx.reply_bulk(b"mode");
            ctx.reply_simple(mode_word(m));
            ctx.reply_bulk(b"owner");
            ctx.reply_bulk(&h.owner.bytes());
            ctx.reply_bulk(b"token");
            ctx.reply(token(h.hold.token));
            ctx.reply_bulk(b"ttl");
            ctx.reply_int(ms_left(h.hold.deadline, now, fraction));
        }
        let mode = lock.and_then(|l| l.mode(now)).map_or(c"none", mode_word);
        ctx.reply_bulk(b"mode");
        ctx.reply_simple(mode);
        ctx.reply_bulk(b"queue");
        queue::reply(ctx, &waiting, Shape::Lock);
        ctx.reply_bulk(b"token");
        ctx.reply(token(lock.map_or(0, |l| l.last_token())));
        ctx.reply_bulk(b"waiters");
        ctx.reply_int(seen.waiters as i64);
        Reply::Written
    })
}
