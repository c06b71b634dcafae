//! After the core decided: make Redis agree. Replicate the effects (where this server decided
//! them), announce them as keyspace events, answer the waiters the core granted or whose wait
//! it ended, and keep the key's wake-up in step with its leases and waits, or delete the key
//! when nothing is left. Lock keys carry no Redis TTL: the module's timer ends every lease, so
//! no eviction policy that picks keys by TTL (`volatile-*`) can remove a live lock, and a
//! replica's keys equal its master's.

use std::ffi::CStr;

use redis_lease_core::{
    Changes, DropReason, Effect, Env, Grants, Keyed, Kind, Lock, Mode, RwLock, Tokens, Waiter,
};

use crate::clock;
use crate::ffi::key::{Key, Typed, WrongType};
use crate::ffi::replicate::Owner;
use crate::ffi::{notify, replicate, server};
use crate::holdback::Lobby;
use crate::index::Slot;
use crate::value::Stored;
use crate::wire::Word;
use crate::{holdback, schedule, state, waiters};

/// Per-key values of a multi-key request, inline for up to four keys.
type Few<T> = smallvec::SmallVec<[T; 4]>;

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

/// How the commit path finds a key's value.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// Only a key that exists (a missing key: nothing to do).
    Existing,
    /// Made if missing.
    Create,
}

/// The one way a key of the module's types changes where this server decides: its value
/// found (or made), its index entry made sure of, the core operation `op` run with the
/// module's clock, token source, waiter registry and hold-back (see [`run`]), then Redis made
/// to agree ([`commit`]). Every entry point that decides (commands, the timer, opened
/// lobbies, reloads) comes through here, so none can skip a rule. `Ok(None)`: no key and
/// `Open::Existing`.
///
/// The hold-back's lobby is part of it: a name with no key whose waiters wait while grants
/// are held has its core state there, and `op` runs on that state, with grants closed, as it
/// would on the key (same kind, limit, permits, max-waiters and arrival order; another kind
/// is WRONGTYPE). When grants are open again the state becomes the key; when a key arrived at
/// the name meanwhile (RESTORE, RENAME, COPY, MOVE), the key takes its waiters in by the
/// core's rules (`Keyed::merge`) before `op`.
pub fn decide<K: Keyed, T>(
    key: Key,
    open: Open,
    origin: Origin,
    op: impl FnOnce(&mut Stored<K>, &mut Env) -> (Changes, T),
) -> Result<Option<T>, WrongType>
where
    Stored<K>: Typed,
{
    let (db, name) = (key.db(), key.name_bytes());
    let mut lobby = None;
    // One relaxed load when no name is held back (the common case).
    if let Some(kind) = holdback::lobby_kind(db, name) {
        match key.peek::<Stored<K>>()? {
            Some(_) => lobby = holdback::take(db, name),
            None if !key.is_empty() => return Err(WrongType),
            None => {
                if kind != K::KIND {
                    return Err(WrongType);
                }
                if open == Open::Existing {
                    return Ok(None);
                }
                let Some(l) = holdback::take(db, name) else {
                    return Ok(None);
                };
                if holdback::grants(db, name) == Grants::Held {
                    return Ok(Some(in_lobby::<K, T>(db, name, l, op)));
                }
                // Grants opened: the lobby becomes the key.
                lobby = Some(l);
            }
        }
    }
    on_value(key, open, origin, |v| {
        let from = lobby.and_then(|l| join::<K>(v, (db, name), l));
        run(v, (db, name), from, false, op)
    })
}

/// A lobby meets the key of its name: its waiters follow the key's index entry (or are
/// answered WRONGTYPE if the key is of another kind); the lobby's state, to merge.
fn join<K: Keyed>(v: &mut Stored<K>, place: (i32, &[u8]), lobby: Lobby) -> Option<Lock> {
    if v.slot != lobby.slot {
        schedule::detach(lobby.slot);
    }
    let mut lock = lobby.lock;
    if lobby.kind != K::KIND {
        for w in lock.take_waiters() {
            waiters::answer(w.id, waiters::Answer::WrongType);
        }
        return None;
    }
    let ids: Vec<u64> = lock.waiters().map(|w| w.id).collect();
    waiters::rebind(&ids, place, v.slot);
    Some(lock)
}

/// Runs `op` on a lobby's state, grants closed, and puts it back (or drops it, empty).
fn in_lobby<K: Keyed, T>(
    db: i32,
    name: &[u8],
    lobby: Lobby,
    op: impl FnOnce(&mut Stored<K>, &mut Env) -> (Changes, T),
) -> T {
    let mut v = Stored::<K>::default();
    *v.core.lock_mut() = lobby.lock;
    v.slot = lobby.slot;
    // Waiters whose clients left go first (the timer may have seen them leave already).
    let gone: Vec<u64> = (v.core.lock().waiters())
        .filter(|w| !waiters::alive(w.id))
        .map(|w| w.id)
        .collect();
    let (changes, out) = run(&mut v, (db, name), None, true, |v, env| {
        let mut changes = Changes::default();
        for id in gone {
            changes.append(v.core.cancel(id, env).0);
        }
        let (c, out) = op(v, env);
        changes.append(c);
        (changes, out)
    });
    // Nothing is held there and grants are closed: no effect can come of it.
    debug_assert!(changes.effects.is_empty(), "{changes:?}");
    waiters::answer_changes(&changes);
    let lock = std::mem::take(v.core.lock_mut());
    let slot = std::mem::replace(&mut v.slot, Slot::NONE);
    holdback::put(
        db,
        name,
        Lobby {
            slot,
            kind: K::KIND,
            lock,
        },
    );
    out
}

/// The same for effects decided elsewhere (a master's replication stream, the AOF): `f`
/// applies them to the core with the server's token source, without clock or queue.
pub fn replay<K: Keyed, T>(
    key: Key,
    open: Open,
    f: impl FnOnce(&mut K, &mut Tokens) -> (Changes, T),
) -> Result<Option<T>, WrongType>
where
    Stored<K>: Typed,
{
    on_value(key, open, Origin::Replayed, |v| {
        let mut tokens = state::with(|s| s.tokens);
        let out = f(&mut v.core, &mut tokens);
        state::with(move |s| s.tokens = tokens);
        out
    })
}

fn on_value<K: Keyed, T>(
    mut key: Key,
    open: Open,
    origin: Origin,
    f: impl FnOnce(&mut Stored<K>) -> (Changes, T),
) -> Result<Option<T>, WrongType>
where
    Stored<K>: Typed,
{
    let (db, name) = (key.db(), key.name_bytes());
    let v = match open {
        Open::Existing => match key.value::<Stored<K>>()? {
            Some(v) => v,
            None => return Ok(None),
        },
        Open::Create => {
            let (v, created) = key.value_or_create::<Stored<K>>(Stored::default)?;
            if created {
                state::count_key(1);
            }
            v
        }
    };
    ensure_slot(v, db, name);
    let before = v.core.lock().holder_count();
    let (changes, out) = f(v);
    commit::<K>(key, before, &changes, origin);
    Ok(Some(out))
}

/// The same path for several read-write lock keys of one command (RWLOCK.MLOCK, MUNLOCK,
/// MRENEW, a parked multi-key request's grant): every key's value found (or made, with
/// `Open::Create`; a missing one is an empty lock that is not kept, with no index entry), its
/// index entry made sure of and its departed waiters taken out, then one core operation over
/// all of them with one clock and token source (grants held if any key's are), then each key
/// committed. A name whose state waits in the hold-back lobby becomes its key first and takes
/// the lobby's waiters in by the core's rules, as in [`decide`] (commit parks it again if
/// grants are still held there); a lobby of another kind is WRONGTYPE. WRONGTYPE before
/// anything is made.
pub fn decide_many<T>(
    mut keys: Vec<Key>,
    open: Open,
    origin: Origin,
    op: impl FnOnce(&mut [&mut Stored<RwLock>], &[Grants], &mut Env) -> (Vec<Changes>, T),
) -> Result<T, WrongType> {
    for key in &keys {
        key.peek::<Stored<RwLock>>()?;
        if holdback::lobby_kind(key.db(), key.name_bytes()).is_some_and(|k| k != Kind::RwLock) {
            return Err(WrongType);
        }
    }
    // On the stack for up to four keys (what most requests name): no allocation of ours.
    let mut before: Few<usize> = Few::new();
    let mut places: Few<(i32, &[u8])> = Few::new();
    let mut lobbies: Few<Option<Lock>> = Few::new();
    for key in &mut keys {
        let (db, name) = (key.db(), key.name_bytes());
        places.push((db, name));
        let lobby = holdback::take(db, name);
        let v = match (open, lobby.is_some()) {
            (Open::Create, _) | (Open::Existing, true) => {
                let (v, created) = key.value_or_create::<Stored<RwLock>>(Stored::default)?;
                if created {
                    state::count_key(1);
                }
                Some(v)
            }
            (Open::Existing, false) => key.value::<Stored<RwLock>>()?,
        };
        before.push(v.as_ref().map_or(0, |v| v.core.lock().holder_count()));
        lobbies.push(v.and_then(|v| {
            ensure_slot(v, db, name);
            lobby.and_then(|l| join::<RwLock>(v, (db, name), l))
        }));
    }
    let (now, round_up) = clock::now();
    let mut spare: Few<Stored<RwLock>> = (0..keys.len()).map(|_| Stored::default()).collect();
    let mut values: Few<&mut Stored<RwLock>> = Few::new();
    for (key, s) in keys.iter_mut().zip(spare.iter_mut()) {
        match key.value::<Stored<RwLock>>() {
            Ok(Some(v)) => values.push(v),
            _ => values.push(s),
        }
    }
    let slots: Few<Slot> = values.iter().map(|v| v.slot).collect();
    let (mut tokens, mut quiet, cancels, suspect) = state::with(move |s| {
        let suspect = holdback::suspect(s, now);
        let quiet = s.quarantine_until == 0 && s.evicted.is_empty() && crate::floor::none_held();
        let cancels: Few<Vec<u64>> = slots
            .iter()
            .map(|sl| {
                if sl.is_none() {
                    Vec::new()
                } else {
                    s.waiters.take_cancels_of(*sl)
                }
            })
            .collect();
        (s.tokens, quiet, cancels, suspect)
    });
    let stall = suspect.then(|| {
        let mono = server::monotonic_ms();
        state::with(move |s| holdback::ran(s, mono))
    });
    if let Some(gap) = stall.flatten() {
        holdback::stalled(gap);
        quiet = false;
    }
    // Each name's own grants: a quarantine holds every one back, an evicted lease or an
    // importing Cluster slot only its own (see `multi`).
    let grants: Few<Grants> = places
        .iter()
        .map(|(db, n)| {
            if quiet {
                Grants::Open
            } else {
                holdback::grants(*db, n)
            }
        })
        .collect();
    let alive = waiters::alive;
    let mut env = Env {
        now,
        round_up,
        mono: schedule::mono(),
        tokens: &mut tokens,
        alive: &alive,
        grants: Grants::Open,
    };
    let mut pre: Few<Changes> = Few::new();
    for (((v, ids), from), g) in values.iter_mut().zip(cancels).zip(lobbies).zip(&grants) {
        env.grants = *g;
        let mut c = Changes::default();
        for id in ids {
            c.append(v.core.cancel(id, &mut env).0);
        }
        if let Some(from) = from {
            c.append(v.core.merge(from, &mut env));
        }
        pre.push(c);
    }
    let (changes, out) = op(&mut values, &grants, &mut env);
    drop(values);
    state::with(move |s| s.tokens = tokens);
    for (((key, b), mut c), more) in keys.into_iter().zip(before).zip(pre).zip(changes) {
        c.append(more);
        commit::<RwLock>(key, b, &c, origin);
    }
    Ok(out)
}

/// Puts `waiting` (taken out of this name's key earlier, by a reload) back in the key's queue
/// by arrival, then serves who can be served.
pub fn requeue<K: Keyed>(key: Key, waiting: Vec<Waiter>)
where
    Stored<K>: Typed,
{
    let origin = Origin::Here {
        owner: None,
        own: false,
    };
    let place = (key.db(), key.name_bytes());
    let _ = decide::<K, ()>(key, Open::Existing, origin, |v, env| {
        let ids: Vec<u64> = waiting.iter().map(|w| w.id).collect();
        waiters::rebind(&ids, place, v.slot);
        for w in waiting {
            if waiters::alive(w.id) {
                v.core.lock_mut().requeue(w);
            }
        }
        (v.core.tick(env), ())
    });
}

/// Runs a core operation with the module's clock, token source and waiter registry, and with
/// grants held while the server is in quarantine or the key's evicted leases may still run
/// (always, for a lobby: `closed`). `from`: a lobby's state for the key to take in first.
fn run<K: Keyed, T>(
    v: &mut Stored<K>,
    place: (i32, &[u8]),
    from: Option<Lock>,
    closed: bool,
    op: impl FnOnce(&mut Stored<K>, &mut Env) -> (Changes, T),
) -> (Changes, T) {
    let (now, round_up) = clock::now();
    let slot = v.slot;
    // One look at the state for what every operation needs (no monotonic clock read unless
    // the wall clock hints at a stall: each turn of the event loop checks it anyway).
    let (mut tokens, mut quiet, cancels, suspect) = state::with(move |s| {
        let suspect = holdback::suspect(s, now);
        let quiet = s.quarantine_until == 0 && s.evicted.is_empty() && crate::floor::none_held();
        (s.tokens, quiet, s.waiters.take_cancels_of(slot), suspect)
    });
    let stall = suspect.then(|| {
        let mono = server::monotonic_ms();
        state::with(move |s| holdback::ran(s, mono))
    });
    if let Some(gap) = stall.flatten() {
        // Before this request is decided: it may come from a client of the replaced master.
        holdback::stalled(gap);
        quiet = false;
    }
    let grants = if closed {
        Grants::Held
    } else if quiet {
        Grants::Open
    } else {
        holdback::grants(place.0, place.1)
    };
    let alive = waiters::alive;
    let out = {
        let mut env = Env {
            now,
            round_up,
            mono: schedule::mono(),
            tokens: &mut tokens,
            alive: &alive,
            grants,
        };
        if cancels.is_empty() && from.is_none() {
            // The common case: the operation's changes are all there is (no copy of them).
            op(v, &mut env)
        } else {
            // Waiters that left are taken out first, so the queue the rules see is exact.
            let mut changes = Changes::default();
            for id in cancels {
                let (c, _) = v.core.cancel(id, &mut env);
                changes.append(c);
            }
            if let Some(from) = from {
                changes.append(v.core.merge(from, &mut env));
            }
            let (c, out) = op(v, &mut env);
            changes.append(c);
            (changes, out)
        }
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
        (_, Renew { .. } | Limit { .. } | Grant { .. } | Take { .. } | Cap { .. }) => return None,
    })
}

/// Counts `changes`'s effects for INFO, and times the holds they ended: one look at the state.
fn count(kind: Kind, changes: &Changes) {
    let (effects, ended) = (&changes.effects, &changes.ended);
    state::with(move |s| {
        let t = &mut s.stats;
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
                (_, Effect::Limit { .. } | Effect::Cap { .. }) => {}
            }
        }
        for e in ended {
            s.hold_times.record(e.held_ms);
        }
    });
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
fn commit<K: Keyed>(mut key: Key, holders_before: usize, changes: &Changes, origin: Origin)
where
    Stored<K>: Typed,
{
    let ctx = key.ctx();
    let name = key.name();
    let Ok(Some(v)) = key.value::<Stored<K>>() else {
        waiters::answer_changes(changes);
        return;
    };
    let lock = v.core.lock();
    state::count_holders(lock.holder_count() as i64 - holders_before as i64);
    if !changes.effects.is_empty() {
        if let Origin::Here { owner, own } = origin {
            if own && is_own_effect(changes) {
                replicate::verbatim(ctx);
            } else {
                replicate::effects(ctx, name, Word::of_kind(K::KIND), owner, &changes.effects);
            }
            count(K::KIND, changes);
            crate::ended::log_lapses(ctx, name, changes);
        }
        for e in &changes.effects {
            if let Some(ev) = event(K::KIND, e) {
                notify::keyspace(ctx, ev, name);
            }
        }
    }
    waiters::answer_changes(changes);
    if !changes.ready.is_empty() {
        // Multi-key requests at the head here: granted by the entry point's `multi::drain`
        // (commands and the timer drain before they return), or, where an entry point does
        // not (a server event, a load), by the timer that the next turn of the event loop
        // arms when it finds some still pending (`events::turn`).
        let ready = &changes.ready;
        state::with(move |s| s.waiters.push_ready(ready));
        state::set_ready(true);
    }
    settle::<K>(key);
}

/// Deletes the key when nothing is held or awaited; moves its state to the lobby, outside the
/// keyspace, when nothing is held but some wait; else schedules its next wake-up.
fn settle<K: Keyed>(mut key: Key)
where
    Stored<K>: Typed,
{
    let (db, name) = (key.db(), key.name_bytes());
    let Ok(Some(v)) = key.value::<Stored<K>>() else {
        return;
    };
    let lock = v.core.lock_mut();
    if lock.holder_count() == 0 && lock.waiter_count() > 0 {
        // Nothing is held but some wait (grants are held back, or a multi-key request at
        // the head waits for its other keys): the name's whole state waits in the lobby, so
        // the keyspace holds only what replicas and the AOF hold.
        let lock = std::mem::take(lock);
        let slot = std::mem::replace(&mut v.slot, Slot::NONE);
        holdback::park(db, name, slot, K::KIND, lock);
    }
    if v.core.lock().is_empty() {
        let slot = std::mem::replace(&mut v.slot, Slot::NONE);
        if holdback::lobby_slot(db, name) != Some(slot) {
            schedule::detach(slot);
        }
        key.delete();
        return;
    }
    let mut when = schedule::wakeup_of(v.core.lock());
    if v.core.lock().waiter_count() > 0 {
        // Waiters behind holders while grants are held back: look again when grants open.
        if let Some(open) = holdback::opens_at(db, name) {
            when = Some(when.map_or(open, |w| w.min(open)));
        }
    }
    schedule::set(v.slot, when);
}

/// Makes sure a value has its index entry (a fresh key, or one loaded without its name).
pub fn ensure_slot<K: Keyed>(v: &mut Stored<K>, db: i32, name: &[u8]) {
    if v.slot.is_none() || !schedule::is_at(v.slot, db, name) {
        v.slot = schedule::attach(db, name);
    }
}
