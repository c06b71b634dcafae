//! After the core decided: make Redis agree. Replicate the effects (master only), announce
//! them as keyspace events, answer the waiters that were granted, and keep the key's expiry
//! and wake-up time in step with its leases, or delete it when nothing is left.

use redis_lease_core::{Changes, DropReason, Effect, Env, Kind, Mode};
use redis_module::{raw, Context, RedisString};

use crate::key::Key;
use crate::state;
use crate::types::LeaseValue;

/// Where the changes happened.
pub struct Place<'a> {
    pub ctx: &'a Context,
    pub key: &'a Key,
    pub name: &'a RedisString,
    pub db: i32,
    /// The request's owner argument, if any (replication reuses it).
    pub owner: Option<&'a RedisString>,
}

/// Runs a core operation on `v` with the module's clock (`clock::now()`), tokens and waiter
/// registry.
pub fn run<V: LeaseValue, T>(
    v: &mut V,
    (now, round_up): (u64, bool),
    op: impl FnOnce(&mut V, &mut Env) -> (Changes, T),
) -> (Changes, T) {
    let mut tokens = state::with(|s| s.tokens);
    let alive = |id: u64| state::waiter_alive(id);
    let out = {
        let mut env = Env {
            now,
            round_up,
            tokens: &mut tokens,
            alive: &alive,
        };
        op(v, &mut env)
    };
    state::with(|s| s.tokens = tokens);
    out
}

/// The keyspace event announcing `e`, if any (a literal: no allocation per event).
fn event(kind: Kind, e: &Effect) -> Option<&'static std::ffi::CStr> {
    use {DropReason::Resign, Effect::*, Kind::*, Mode::*};
    Some(match (kind, e) {
        (RwLock, Grant { mode: Read, .. }) => c"rwlock.read",
        (RwLock, Grant { mode: Write, .. }) => c"rwlock.write",
        (RwLock, Release { .. }) => c"rwlock.release",
        (RwLock, Drop { .. }) => c"rwlock.lapse",
        (Election, Grant { .. }) => c"leader.elect",
        (Election, Drop { reason: Resign, .. } | Release { .. }) => c"leader.resign",
        (Election, Drop { .. }) => c"leader.lapse",
        (_, Renew { .. }) => return None,
    })
}

fn count(kind: Kind, effects: &[Effect]) {
    state::with(|s| {
        for e in effects {
            match (kind, e) {
                (Kind::Election, Effect::Grant { .. }) => s.stats.grants_leader += 1,
                (
                    _,
                    Effect::Grant {
                        mode: Mode::Read, ..
                    },
                ) => s.stats.grants_read += 1,
                (_, Effect::Grant { .. }) => s.stats.grants_write += 1,
                (_, Effect::Release { .. }) => s.stats.releases += 1,
                (_, Effect::Renew { .. }) => s.stats.renewals += 1,
                (
                    _,
                    Effect::Drop {
                        reason: DropReason::Lapse,
                        ..
                    },
                ) => s.stats.lapses += 1,
                (_, Effect::Drop { .. }) => s.stats.resignations += 1,
            }
        }
    });
}

/// Lapsed leases at `verbose`: a holder that stopped renewing is worth a line when debugging.
fn log_lapses(place: &Place, effects: &[Effect]) {
    for e in effects {
        if let Effect::Drop {
            owner,
            reason: DropReason::Lapse,
        } = e
        {
            place.ctx.log_verbose(&format!(
                "lease: the lease of '{}' on '{}' lapsed",
                String::from_utf8_lossy(owner),
                String::from_utf8_lossy(place.name.as_slice())
            ));
        }
    }
}

/// Makes Redis agree with `changes`, made on `v` (which lives in `place.key`).
/// `replicate`: this server decided them (a master), so it replicates and counts them.
/// `holders_before`: `v`'s holder count before the operation (for the INFO gauge).
pub fn commit<V: LeaseValue>(
    place: &Place,
    v: &mut V,
    changes: Changes,
    replicate: bool,
    holders_before: usize,
) {
    let lock = v.lock();
    state::count_holders(lock.holder_count() as i64 - holders_before as i64);
    if !changes.effects.is_empty() {
        if replicate {
            crate::replicate::effects(
                place.ctx,
                place.name,
                V::NAME,
                place.owner,
                &changes.effects,
            );
            count(V::KIND, &changes.effects);
            log_lapses(place, &changes.effects);
        }
        for e in &changes.effects {
            if let Some(ev) = event(V::KIND, e) {
                unsafe {
                    raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
                        place.ctx.ctx,
                        raw::REDISMODULE_NOTIFY_MODULE,
                        ev.as_ptr(),
                        place.name.inner,
                    );
                }
            }
        }
    }
    for w in &changes.woken {
        crate::blocking::grant(w.waiter, w.token);
    }
    settle(place, v);
}

/// How long after its last deadline a key expires by itself. The module's own timer fires at the
/// deadline (re-arming at once if the clock reads a hair early) and announces the lapse; this
/// slack keeps Redis's expiry cycle from deleting the key silently in that same moment.
pub const EXPIRE_SLACK_MS: u64 = 20;

/// Deletes the key when nothing is held or awaited; else sets its expiry to the last lease
/// deadline (none while clients wait: the wake-up timer serves them) and its wake-up time to
/// the first deadline.
pub fn settle<V: LeaseValue>(place: &Place, v: &mut V) {
    let lock = v.lock_mut();
    if lock.is_empty() {
        crate::wakeup::forget(place.db, place.name.as_slice(), lock);
        place.key.delete();
        return;
    }
    let expire = if lock.waiter_count() > 0 {
        None
    } else {
        lock.last_deadline()
            .map(|d| d.saturating_add(EXPIRE_SLACK_MS))
    };
    place.key.expire_at(expire);
    crate::wakeup::remember(place.db, place.name.as_slice(), lock);
}
