//! Clients parked by `WAIT`: the core keeps each key's queue of waiter ids (and their wait
//! deadlines); here each id maps to its blocked client. Every parked client gets exactly one
//! answer, through one path: a token when the core granted it, nil when the core ended its
//! wait, LOCKGONE when its key went away, READONLY when this server became a replica. A client
//! that leaves (disconnect, CLIENT KILL) is taken out of its queue and never granted.

use std::ffi::CStr;

use redis_lease_core::{Changes, Id};

use crate::clock::now_ms;
use crate::ffi::block::{self, Parked};
use crate::ffi::ctx::Ctx;
use crate::ffi::key::WRONGTYPE;
use crate::ffi::reply::ReplyError;
use crate::ffi::server::monotonic_ms;
use crate::index::Slot;
use crate::num::saturating_i64;
use crate::registry::Rec;
use crate::state;

/// What a parked client is answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    Token(u64),
    /// A multi-key request granted: a token per key, in its order.
    Tokens(Vec<u64>),
    /// A multi-key request that can never be granted (an error reply).
    Refused(String),
    /// The wait ended without a grant.
    Nil,
    /// The key was deleted, renamed, moved or flushed.
    Gone,
    /// This server became a replica.
    Demoted,
    /// The name now holds a key of another kind (it arrived while the request waited in the
    /// lobby): the request's own answer had the key been there.
    WrongType,
}

pub const GONE: &CStr =
    c"LOCKGONE the key was deleted, renamed or flushed while this request waited";
pub const DEMOTED: &CStr =
    c"READONLY this server became a replica while the request waited: retry on the master";

struct Waiters;

impl Parked for Waiters {
    type Answer = Answer;

    fn reply(ctx: &Ctx, answer: Option<&Answer>) {
        match answer {
            Some(Answer::Token(t)) => ctx.reply_int(saturating_i64(*t)),
            Some(Answer::Tokens(ts)) => {
                ctx.reply_array(ts.len());
                for t in ts {
                    ctx.reply_int(saturating_i64(*t));
                }
            }
            Some(Answer::Refused(e)) => ctx.reply_error(&ReplyError::from(e.clone())),
            Some(Answer::Gone) => ctx.reply_error_c(GONE),
            Some(Answer::Demoted) => ctx.reply_error_c(DEMOTED),
            Some(Answer::WrongType) => ctx.reply_error(&WRONGTYPE.into()),
            Some(Answer::Nil) | None => ctx.reply_null(),
        }
    }

    fn disconnected(client: usize) {
        leave(client);
    }
}

/// A fresh waiter id (ids grow with arrival, which is the queue's order).
pub fn next_id() -> u64 {
    state::with(|s| s.waiters.next_id())
}

/// Parks the running command's client as waiter `id` of `owner` on the key at `slot` (and,
/// for a multi-key request, the keys at `more`). The command then returns without a reply.
pub fn park(ctx: &Ctx, id: u64, owner: &Id, slot: Slot, more: Vec<Slot>) {
    let client = block::block::<Waiters>(ctx);
    // Waits are timed on the monotonic clock, as their deadlines are.
    let since = monotonic_ms();
    let owner = owner.clone();
    state::with(|s| {
        s.waiters.insert(
            id,
            Rec {
                client,
                slot,
                since,
                owner,
                more,
            },
        );
        s.stats.waits += 1;
    });
}

/// Whether waiter `id` still belongs to a connected, parked client.
pub fn alive(id: u64) -> bool {
    state::with(|s| s.waiters.contains(id))
}

/// Answers waiter `id` (no-op if it is not parked any more); true if it was.
pub fn answer(id: u64, a: Answer) -> bool {
    let now = monotonic_ms();
    let rec = state::with(|s| {
        let rec = s.waiters.remove(id)?;
        let waited = now.saturating_sub(rec.since);
        s.wait_times.record(waited);
        let st = &mut s.stats;
        match &a {
            Answer::Token(_) | Answer::Tokens(_) => {
                st.handoffs += 1;
                st.wait_ms_total += waited;
                st.wait_ms_max = st.wait_ms_max.max(waited);
            }
            Answer::Nil | Answer::Refused(_) => st.wait_timeouts += 1,
            Answer::Gone | Answer::WrongType => st.waiters_lockgone += 1,
            Answer::Demoted => st.waiters_left += 1,
        }
        Some(rec)
    });
    let Some(rec) = rec else { return false };
    block::answer::<Waiters>(rec.client, a);
    true
}

/// Answers the waiters an operation granted or whose wait it ended.
pub fn answer_changes(changes: &Changes) {
    for w in &changes.woken {
        answer(w.waiter, Answer::Token(w.token));
    }
    for id in &changes.timed_out {
        answer(*id, Answer::Nil);
    }
}

/// The key `name` in `db` has a new index entry `slot`: its parked waiters follow it.
pub fn rebind(ids: &[u64], place: (i32, &[u8]), slot: Slot) {
    let ids = ids.to_vec();
    state::with(move |s| {
        for id in ids {
            s.waiters.rebind(id, place, slot);
        }
    });
}

/// The index entries of keys (and lobbies) that have waiters, parked or departed but still
/// queued, each once.
pub fn slots() -> Vec<Slot> {
    let mut slots: Vec<Slot> = state::with(|s| {
        let mut v: Vec<Slot> = s.waiters.cancel_slots();
        for id in s.waiters.ids_of(None) {
            if let Some(r) = s.waiters.get(id) {
                // Every key of a multi-key request, not only its first.
                v.push(r.slot);
                v.extend(r.more.iter().copied());
            }
        }
        v
    });
    slots.sort();
    slots.dedup();
    slots
}

/// Every key (and lobby) with waiters is looked at now: the rules they wait under changed
/// (`CONFIG SET lease.quarantine`), or where their wait deadlines fall on the wall clock (a
/// step of the wall clock). Each then sets its next wake-up again from its own deadlines.
pub fn look_again() {
    let at = now_ms();
    for slot in slots() {
        crate::schedule::set(slot, Some(at));
    }
}

/// Every waiter id (for a demotion).
pub fn all() -> Vec<u64> {
    state::with(|s| s.waiters.ids_of(None))
}

/// The client behind `client` stops waiting: take it out of the registry, remember to take it
/// out of its key's queue (done the next time the key is touched where replication is
/// allowed: the timer is armed for now), and let go of the handle.
fn leave(client: usize) {
    let now = monotonic_ms();
    let left = state::with(move |s| {
        let (_, rec) = s.waiters.leave(client)?;
        s.wait_times.record(now.saturating_sub(rec.since));
        s.stats.waiters_left += 1;
        Some(rec)
    });
    if let Some(rec) = left {
        crate::schedule::arm(now_ms());
        block::release(rec.client);
    }
}

/// How many of `slot`'s queued waiters already left.
pub fn cancels_of(slot: Slot) -> usize {
    state::with(|s| s.waiters.cancels_of(slot))
}

/// Every departed waiter still queued somewhere, by key.
pub fn take_cancels() -> Vec<(Slot, u64)> {
    state::with(|s| s.waiters.take_cancels())
}
