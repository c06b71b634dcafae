//! The `queue` of `*.INFO`: who waits on a key, in queue order, since when and until when.

use redis_lease_core::{Keyed, Mode, Ms, Waiter};

use super::{ms_left, Seen};
use crate::ffi::ctx::Ctx;
use crate::ffi::server;
use crate::{holdback, state};

/// The most waiters a reply shows (their count is in `waiters`).
pub const SHOWN: usize = 100;

/// What each waiter's map holds beside `waited` and `left`.
#[derive(Clone, Copy)]
pub enum Shape {
    /// `owner`, `mode`.
    Lock,
    /// `owner`, `permits`.
    Semaphore,
    /// `candidate`.
    Election,
}

/// The key's live waiters (the lobby's for a name without a key), at most [`SHOWN`], each
/// with the monotonic ms at which it was queued.
pub fn of<K: Keyed + Sync>(ctx: &Ctx, name: &[u8], seen: &Seen<'_, K>) -> Vec<(Waiter, Ms)> {
    let lobby = match seen.value {
        Some(_) => Vec::new(),
        None => holdback::queue_on(ctx.db(), name),
    };
    let lock = seen.value.map(|v| v.core.lock());
    state::with(move |s| {
        let queued = lock.into_iter().flat_map(|l| l.waiters()).chain(&lobby);
        queued
            .filter_map(|w| Some((w.clone(), s.waiters.get(w.id)?.since)))
            .take(SHOWN)
            .collect()
    })
}

/// Replies the `queue` array: one map per waiter (see [`Shape`]) with `waited` (ms since it
/// was queued) and `left` (ms until its wait ends, -1 when it waits without a limit), both on
/// the monotonic clock that times waits.
pub fn reply(ctx: &Ctx, queue: &[(Waiter, Ms)], shape: Shape) {
    let (now, fraction) = server::monotonic();
    ctx.reply_array(queue.len());
    for (w, since) in queue {
        let own = match shape {
            Shape::Election => 1,
            Shape::Lock | Shape::Semaphore => 2,
        };
        ctx.reply_map(own + 2);
        match shape {
            Shape::Election => ctx.reply_bulk(b"candidate"),
            Shape::Lock | Shape::Semaphore => ctx.reply_bulk(b"owner"),
        }
        ctx.reply_bulk(&w.owner.bytes());
        match shape {
            Shape::Lock => {
                ctx.reply_bulk(b"mode");
                ctx.reply_simple(mode_word(w.mode));
            }
            Shape::Semaphore => {
                ctx.reply_bulk(b"permits");
                ctx.reply_int(w.permits.into());
            }
            Shape::Election => {}
        }
        ctx.reply_bulk(b"waited");
        ctx.reply_int(crate::num::saturating_i64(now.saturating_sub(*since)));
        ctx.reply_bulk(b"left");
        ctx.reply_int(w.until.map_or(-1, |u| ms_left(u, now, fraction)));
    }
}

/// A mode as `*.INFO` writes it (a holder's or a waiter's).
pub fn mode_word(m: Mode) -> &'static std::ffi::CStr {
    match m {
        Mode::Read => c"read",
        Mode::Write => c"write",
    }
}
