//! `LEADER.*`: leader election.

use redis_lease_core::{DropReason, Effect, Election};

use super::queue::{self, Shape};
use super::{
    acquire, cap_left, change, held_id, ms_left, new_id, options, read, refused, replay_own, token,
    ttl, Outcome,
};
use crate::clock;
use crate::config;
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::reply::Reply;

/// `LEADER.CAMPAIGN key candidate ttl [WAIT ms] [MAXHOLD ms]`
pub fn campaign(ctx: &Ctx, args: &Args) -> Outcome {
    let candidate = new_id(args, 2, "candidate")?;
    let ttl = ttl(args, 3)?;
    let o = options(ctx, args, 4, None)?;
    acquire::<Election>(ctx, args, &candidate, o.wait, |core, env, wait| {
        let max = config::max_waiters();
        core.campaign_capped(&candidate, ttl, wait, max, o.max_hold, env)
    })
}

/// `LEADER.RENEW key candidate ttl`
pub fn renew(ctx: &Ctx, args: &Args) -> Outcome {
    let candidate = held_id(args, 2, "candidate")?;
    let ttl = ttl(args, 3)?;
    let t = change::<Election, _>(ctx, args, &candidate, Ok(None), false, |core, env| {
        core.try_renew(&candidate, ttl, env)
    })?;
    let t = t.map_err(refused)?;
    Ok(t.map_or(Reply::Nil, token))
}

/// `LEADER.RESIGN key candidate`
pub fn resign(ctx: &Ctx, args: &Args) -> Outcome {
    let candidate = held_id(args, 2, "candidate")?;
    if ctx.replicated() {
        let resign = Effect::Drop {
            owner: candidate,
            reason: DropReason::Resign,
        };
        return Ok(Reply::Int(
            replay_own::<Election>(ctx, args, resign)?.into(),
        ));
    }
    let done = change::<Election, _>(ctx, args, &candidate, false, true, |core, env| {
        core.resign(&candidate, env)
    })?;
    Ok(Reply::Int(done.into()))
}

/// `LEADER.CURRENT key`: `[candidate, term, ttl-left-ms]`, or nil.
pub fn current(ctx: &Ctx, args: &Args) -> Outcome {
    let (now, fraction) = clock::now();
    read::<Election, _>(ctx, args, |seen| {
        match seen.value.and_then(|v| v.core.current(now)) {
            Some(h) => {
                ctx.reply_array(3);
                ctx.reply_bulk(&h.owner.bytes());
                ctx.reply(token(h.hold.token));
                ctx.reply_int(ms_left(h.hold.deadline, now, fraction));
                Reply::Written
            }
            None => Reply::Nil,
        }
    })
}

/// `LEADER.INFO key`: a map of `leader` (a map of `candidate`, `cap`, `term`, `ttl`; nil when
/// nobody leads), `queue` (see [`queue::reply`]) and `waiters`.
pub fn info(ctx: &Ctx, args: &Args) -> Outcome {
    let (now, fraction) = clock::now();
    read::<Election, _>(ctx, args, |seen| {
        let waiting = queue::of(ctx, args.bytes(1), &seen);
        ctx.reply_map(3);
        ctx.reply_bulk(b"leader");
        match seen.value.and_then(|v| v.core.current(now)) {
            Some(h) => {
                ctx.reply_map(4);
                ctx.reply_bulk(b"candidate");
                ctx.reply_bulk(&h.owner.bytes());
                ctx.reply_bulk(b"cap");
                ctx.reply_int(cap_left(h.hold.cap, now, fraction));
                ctx.reply_bulk(b"term");
                ctx.reply(token(h.hold.token));
                ctx.reply_bulk(b"ttl");
                ctx.reply_int(ms_left(h.hold.deadline, now, fraction));
            }
            None => ctx.reply_null(),
        }
        ctx.reply_bulk(b"queue");
        queue::reply(ctx, &waiting, Shape::Election);
        ctx.reply_bulk(b"waiters");
        ctx.reply_int(seen.waiters as i64);
        Reply::Written
    })
}
