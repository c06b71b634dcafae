//! After the core decided: make Redis agree. Replicate the effects (where this server decided
//! them), announce them as keyspace events, answer the waiters the core granted or whose wait
//! it ended, and keep the key's wake-up in step with its leases and waits, or delete the key
//! when nothing is left. Lock keys carry no Redis TTL: the module's timer ends every lease, so
//! no eviction policy that picks keys by TTL (`volatile-*`) can remove a live lock, and a
//! replica's keys equal its master's.

use std::ffi::CStr;

use redis_lease_core::{Changes, DropReason, Effect, Env, Grants, Keyed, Kind, Mode};

use crate::clock;
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Key, Typed};
use crate::ffi::replicate::Owner;
use crate::ffi::string::RStr;
use crate::ffi::{notify, replicate};
use crate::index::Slot;
use crate::value::Stored;
use crate::wire::Word;
use crate::{holdback, schedule, state, text, waiters};

/// Who decided the changes.
#[derive(Clone, Copy)]
pub enum Origin<'a> {
    /// This server (a master): it replicates and counts them. `owner` is the request's own
    /// owner (its argument and its id), whose argument replication reuses. `own`: the command is its own effect when
    /// that effect is all it did (an UNLOCK, RESIGN or RELEASE that handed nothing on), so it
    /// is replicated as it came (replicas apply it as that one effect, see `replay_own`).
    Here { owner: Option<Owner<'a>>, own: bool },
    /// A master or the AOF (LEASE.APPLY): applied as they came.
    Replayed,
}

/// Runs a core operation with the module's clock, token source and waiter registry, and with
/// grants held while the server is in quarantine or the key's evicted leases may still run.
pub fn run<K: Keyed, T>(
    v: &mut Stored<K>,
    place: (i32, &[u8]),
    op: impl FnOnce(&mut K, &mut Env) -> (Changes, T),
) -> (Changes, T) {
    let (now, round_up) = clock::now();
    let slot = v.slot;
    // One look at the state for what every operation needs.
    let (mut tokens, mut quiet, cancels, stall) = state::with(move |s| {
        let stall = holdback::ran(s, now);
        let quiet = s.quarantine_until <= now && s.evicted.is_empty() && crate::floor::none_held();
        (s.tokens, quiet, s.waiters.take_cancels_of(slot), stall)
    });
    if let Some(gap) = stall {
        // Before this request is decided: it may come from a client of the replaced master.
        holdback::stalled(gap);
        quiet = false;
    }
    let grants = if quiet {
        Grants::Open
    } else {
        holdback::grants(place.0, place.1, now)
    };
    let alive = waiters::alive;
    let out = {
        let mut env = Env {
            now,
            round_up,
            tokens: &mut tokens,
            alive: &alive,
            grants,
        };
        // Waiters that left are taken out first, so the queue the rules see is exact.
        let mut changes = Changes::default();
        for id in cancels {
            let (c, _) = v.core.cancel(id, &mut env);
            changes.append(c);
        }
        let (c, out) = op(&mut v.core, &mut env);
        changes.append(c);
        (changes, out)
    };
    state::with(move |s| s.tokens = tokens);
    out
}

/// The keyspace event announcing `e`, if any (a literal: no allocation per event).
fn event(kind: Kind, e: &Effect) -> Option<&'static CStr> {
    use {DropReason::Resign, Effect::*, Kind::*, Mode::*};
    Some(match (kind, e) {
        (RwLock, Grant { mode: Read, .. }) => c"rwlock.read",
        (RwLock, Grant { mode: Write, .. }) => c"rwlock.write",
        (RwLock, Release { .. }) => c"rwlock.release",
        (RwLock, Drop { .. }) => c"rwlock.lapse",
        (Election, Grant { .. }) => c"leader.elect",
        (Election, Drop { reason: Resign, .. } | Release { .. }) => c"leader.resign",
        (Election, Drop { .. }) => c"leader.lapse",
        (Semaphore, Take { .. }) => c"semaphore.acquire",
        (Semaphore, Release { .. }) => c"semaphore.release",
        (Semaphore, Drop { .. }) => c"semaphore.lapse",
        (_, Renew { .. } | Limit { .. } | Grant { .. } | Take { .. }) => return None,
    })
}

fn count(kind: Kind, effects: &[Effect]) {
    let mut t = crate::state::Stats::default();
    for e in effects {
        match (kind, e) {
            (Kind::Election, Effect::Grant { .. }) => t.grants_leader += 1,
            (
                _,
                Effect::Grant {
                    mode: Mode::Read, ..
                },
            ) => t.grants_read += 1,
            (_, Effect::Grant { .. }) => t.grants_write += 1,
            (_, Effect::Take { .. }) => t.grants_semaphore += 1,
            (_, Effect::Release { .. }) => t.releases += 1,
            (_, Effect::Renew { .. }) => t.renewals += 1,
            (
                _,
                Effect::Drop {
                    reason: DropReason::Lapse,
                    ..
                },
            ) => t.lapses += 1,
            (_, Effect::Drop { .. }) => t.resignations += 1,
            (_, Effect::Limit { .. }) => {}
        }
    }
    state::with(move |s| s.stats.add_effects(&t));
}

/// Lapsed leases at `verbose`: a holder that stopped renewing is worth a line when debugging.
/// Owners and keys are bytes: escaped, so no byte can break the line.
fn log_lapses(ctx: &Ctx, key: RStr, effects: &[Effect]) {
    for e in effects {
        if let Effect::Drop {
            owner,
            reason: DropReason::Lapse,
        } = e
        {
            ctx.log_verbose(&format!(
                "lease: the lease of '{}' on '{}' lapsed",
                text::escaped(&owner.bytes(), 128),
                text::escaped(key.bytes(), 128)
            ));
        }
    }
}

/// The changes are one give-back and nothing else: no lapse found on the way, nobody served.
fn is_own_effect(changes: &Changes) -> bool {
    changes.woken.is_empty()
        && changes.timed_out.is_empty()
        && matches!(
            changes.effects.as_slice(),
            [Effect::Release { .. }]
                | [Effect::Drop {
                    reason: DropReason::Resign,
                    ..
                }]
        )
}

/// Makes Redis agree with `changes`, made on the value in `key`. `holders_before`: the
/// value's holder count before the operation (for the INFO gauge).
pub fn commit<K: Keyed>(mut key: Key, holders_before: usize, changes: Changes, origin: Origin)
where
    Stored<K>: Typed,
{
    let ctx = key.ctx();
    let name = key.name();
    let Ok(Some(v)) = key.value::<Stored<K>>() else {
        waiters::answer_changes(&changes);
        return;
    };
    let lock = v.core.lock();
    state::count_holders(lock.holder_count() as i64 - holders_before as i64);
    if !changes.effects.is_empty() {
        if let Origin::Here { owner, own } = origin {
            if own && is_own_effect(&changes) {
                replicate::verbatim(ctx);
            } else {
                replicate::effects(ctx, name, Word::of_kind(K::KIND), owner, &changes.effects);
            }
            count(K::KIND, &changes.effects);
            log_lapses(ctx, name, &changes.effects);
        }
        for e in &changes.effects {
            if let Some(ev) = event(K::KIND, e) {
                notify::keyspace(ctx, ev, name);
            }
        }
    }
    waiters::answer_changes(&changes);
    settle::<K>(key);
}

/// Deletes the key when nothing is held or awaited; parks its waiters outside the keyspace
/// when nothing is held and grants are held back; else schedules its next wake-up.
pub fn settle<K: Keyed>(mut key: Key)
where
    Stored<K>: Typed,
{
    let db = key.ctx().db();
    let name = key.name().bytes();
    let Ok(Some(v)) = key.value::<Stored<K>>() else {
        return;
    };
    let lock = v.core.lock_mut();
    if lock.holder_count() == 0 && lock.waiter_count() > 0 {
        let (now, _) = clock::now();
        if holdback::grants(db, name, now) == Grants::Held {
            let waiting = lock.take_waiters();
            let slot = std::mem::replace(&mut v.slot, Slot::NONE);
            holdback::park(db, name, slot, K::KIND, v.core.lock().limit(), waiting);
        }
    }
    if v.core.lock().is_empty() {
        let slot = std::mem::replace(&mut v.slot, Slot::NONE);
        if holdback::lobby_slot(db, name) != Some(slot) {
            schedule::detach(slot);
        }
        key.delete();
        return;
    }
    let when = v.core.lock().next_wakeup();
    schedule::set(v.slot, when);
}

/// Makes sure a value has its index entry (a fresh key, or one loaded without its name).
pub fn ensure_slot<K: Keyed>(v: &mut Stored<K>, db: i32, name: &[u8]) {
    if v.slot.is_none() || !schedule::is_at(v.slot, db, name) {
        v.slot = schedule::attach(db, name);
    }
}
