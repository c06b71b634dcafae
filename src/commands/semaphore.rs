//! `SEMAPHORE.*`: counting semaphores with a lease per holder, served in arrival order.

use redis_lease_core::{Effect, Permits, Semaphore};

use super::queue::{self, Shape};
use super::{
    acquire, cap_left, change, held_id, ms_left, new_id, options, read, refused, replay_own, token,
    ttl, Outcome,
};
use crate::clock;
use crate::config;
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::reply::{Reply, ReplyError};
use crate::parse;

/// `SEMAPHORE.ACQUIRE key owner limit ttl [PERMITS n] [WAIT ms] [MAXHOLD ms]`
pub fn acquire_cmd(ctx: &Ctx, args: &Args) -> Outcome {
    let owner = new_id(args, 2, "owner")?;
    let limit = parse::limit(args.bytes(3)).map_err(ReplyError::from)?;
    let ttl = ttl(args, 4)?;
    let o = options(ctx, args, 5, Some(limit))?;
    acquire::<Semaphore>(ctx, args, &owner, o.wait, |core, env, wait| {
        let req = Permits {
            owner: &owner,
            limit,
            permits: o.permits,
            ttl,
            wait,
            max_waiters: config::max_waiters(),
            max_hold: o.max_hold,
        };
        core.acquire(&req, env)
    })
}

/// `SEMAPHORE.RELEASE key owner`
pub fn release(ctx: &Ctx, args: &Args) -> Outcome {
    let owner = held_id(args, 2, "owner")?;
    if ctx.replicated() {
        let release = Effect::Release { owner };
        return Ok(Reply::Int(
            replay_own::<Semaphore>(ctx, args, release)?.into(),
        ));
    }
    let done = change::<Semaphore, _>(ctx, args, &owner, false, true, |core, env| {
        core.release(&owner, env)
    })?;
    Ok(Reply::Int(done.into()))
}

/// `SEMAPHORE.RENEW key owner ttl`
pub fn renew(ctx: &Ctx, args: &Args) -> Outcome {
    let owner = held_id(args, 2, "owner")?;
    let ttl = ttl(args, 3)?;
    let t = change::<Semaphore, _>(ctx, args, &owner, Ok(None), false, |core, env| {
        core.try_renew(&owner, ttl, env)
    })?;
    Ok(t.map_err(refused)?.map_or(Reply::Nil, token))
}

/// `SEMAPHORE.INFO key`: a map of `holders` (each a map of `owner`, `permits`, `token`,
/// `ttl`, in grant order), `limit`, `queue` (see [`queue::reply`]), `token`, `used` and
/// `waiters`.
pub fn info(ctx: &Ctx, args: &Args) -> Outcome {
    let (now, fraction) = clock::now();
    read::<Semaphore, _>(ctx, args, |seen| {
        let waiting = queue::of(ctx, args.bytes(1), &seen);
        let lock = seen.value.map(|v| &v.core.0);
        let mut live: Vec<_> = lock.into_iter().flat_map(|l| l.live_holders(now)).collect();
        live.sort_unstable_by_key(|h| h.hold.token);
        let used: u64 = live.iter().map(|h| u64::from(h.hold.reads)).sum();
        ctx.reply_map(6);
        ctx.reply_bulk(b"holders");
        ctx.reply_array(live.len());
        for h in &live {
            ctx.reply_map(5);
            ctx.reply_bulk(b"cap");
            ctx.reply_int(cap_left(h.hold.cap, now, fraction));
            ctx.reply_bulk(b"owner");
            ctx.reply_bulk(&h.owner.bytes());
            ctx.reply_bulk(b"permits");
            ctx.reply_int(h.hold.reads.into());
            ctx.reply_bulk(b"token");
            ctx.reply(token(h.hold.token));
            ctx.reply_bulk(b"ttl");
            ctx.reply_int(ms_left(h.hold.deadline, now, fraction));
        }
        ctx.reply_bulk(b"limit");
        ctx.reply_int(lock.map_or(0, |l| l.limit().into()));
        ctx.reply_bulk(b"queue");
        queue::reply(ctx, &waiting, Shape::Semaphore);
        ctx.reply_bulk(b"token");
        ctx.reply(token(lock.map_or(0, |l| l.last_token())));
        ctx.reply_bulk(b"used");
        ctx.reply_int(used as i64);
        ctx.reply_bulk(b"waiters");
        ctx.reply_int(seen.waiters as i64);
        Reply::Written
    })
}
