//! Several read-write lock keys at once, all or nothing (`RWLOCK.MLOCK`).
//!
//! Each key follows the single-key rules for the owner, as if asked alone (re-entry, upgrade,
//! its DEADLOCK, max-waiters, the hold cap). The request is granted only when every key can
//! be granted at once, so no partial hold ever exists. With a wait it is parked on every key
//! it does not already hold, under one waiter id, in the server's one arrival order: it keeps
//! its place in each queue (nobody behind it is served first), a key stops at it when it
//! reaches the head (`Changes::ready`), and the shell calls [`grant_ready`], which grants it on
//! every key in one go once the last of them is ready.
//!
//! Grants may be held back on some names and not others (a quarantine holds every name back,
//! an evicted lease or an importing Cluster slot only its own): each operation takes each
//! key's `Grants`. The request itself is granted only where every key's grants are open, while
//! each key serves its other waiters by its own.

use crate::effect::Changes;
use crate::env::{Env, Grants};
use crate::id::Id;
use crate::lock::{admissible, Kind, Lock, LockError, RwLock, Wait};
use crate::queue::Waiter;
use crate::Mode;

/// A request for holds on several keys.
#[derive(Clone, Copy, Debug)]
pub struct MultiRequest<'a> {
    pub owner: &'a Id,
    pub mode: Mode,
    pub ttl: u64,
    pub wait: Option<Wait>,
    pub max_waiters: usize,
    pub max_hold: u64,
}

/// The answer to a multi-key request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MultiAcquire {
    /// Granted on every key: the tokens, in the keys' order.
    Granted(Vec<u64>),
    /// Not granted, and not waiting.
    Busy,
    /// Parked on the keys it does not hold yet.
    Queued,
}

/// A refusal, and the key (its index in the request) that refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultiError {
    pub key: usize,
    pub error: LockError,
}

/// What a parked multi-key request became when one of its keys reported it ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ready {
    /// Some key is not ready for it yet (or its wait ran out where a key was not: then it
    /// left every queue, and one key's changes time it out).
    NotYet,
    /// Granted on every key: the tokens, in the keys' order.
    Granted(Vec<u64>),
    /// It can never be granted (a key it held would pass its cap; the key's index in the
    /// request): taken out of every queue.
    Refused(MultiError),
}

/// How one key stands toward the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Held already in a way that covers the request (re-entry): never queued.
    Held,
    /// Grantable now; `upgrade`: the owner reads and asks to write.
    Now { upgrade: bool },
    /// Must wait; `upgrade`: in the upgrade slot.
    Wait { upgrade: bool },
}

fn waiter(req: &MultiRequest) -> Waiter {
    Waiter {
        id: req.wait.map_or(0, |w| w.id),
        owner: req.owner.clone(),
        mode: req.mode,
        permits: 1,
        ttl: req.ttl,
        until: req.wait.and_then(|w| w.until),
        max_hold: req.max_hold,
        group: true,
    }
}

/// The single-key rules for the owner on one key, time already passed.
fn plan(lock: &Lock, req: &MultiRequest, env: &Env) -> Result<Plan, LockError> {
    let held = lock.holders.get(req.owner);
    let upgrade = matches!(held, Some(h) if req.mode == Mode::Write && h.writes == 0);
    let may = env.may_grant();
    match held {
        Some(h) if !upgrade => {
            // Re-entry: never queues; it keeps its first grant's cap.
            let deadline = env.deadline(req.ttl);
            if deadline > h.deadline && h.passes_cap(deadline) {
                let left = env.left(h.cap);
                return Err(LockError::MaxHold { left });
            }
            return Ok(Plan::Held);
        }
        _ => {}
    }
    if held.is_none() && req.max_hold > 0 && req.ttl > req.max_hold {
        let left = req.max_hold;
        return Err(LockError::MaxHold { left });
    }
    if upgrade {
        if may && lock.holders.len() == 1 {
            return Ok(Plan::Now { upgrade });
        }
        if req.wait.is_some() && lock.another_upgrade_waits(req.owner, env.alive) {
            return Err(LockError::UpgradeDeadlock);
        }
        return Ok(Plan::Wait { upgrade: true });
    }
    let queued = lock.queue.as_ref().is_some_and(|q| !q.is_empty());
    let admit = admissible(
        &lock.holders,
        lock.limit,
        Kind::RwLock,
        req.owner,
        req.mode,
        1,
    );
    if may && !queued && admit.is_some() {
        return Ok(Plan::Now { upgrade });
    }
    Ok(Plan::Wait { upgrade: false })
}

/// Open only where every key's grants are.
fn all(grants: &[Grants]) -> Grants {
    if grants.iter().all(|g| *g == Grants::Open) {
        Grants::Open
    } else {
        Grants::Held
    }
}

/// Lets time pass on every key, each under its own grants.
fn tick_all(keys: &mut [&mut RwLock], grants: &[Grants], env: &mut Env) -> Vec<Changes> {
    keys.iter_mut()
        .zip(grants)
        .map(|(k, g)| {
            env.grants = *g;
            k.tick(env)
        })
        .collect()
}

/// Grants `w` on every key (each known grantable), in order; on a failure (no token left)
/// gives back the holds already granted, so nothing is held. `changes` gets each key's.
fn grant_all(
    keys: &mut [&mut RwLock],
    grants: &[Grants],
    w: &Waiter,
    env: &mut Env,
    changes: &mut [Changes],
) -> Result<Vec<u64>, MultiError> {
    let mut tokens = Vec::with_capacity(keys.len());
    for i in 0..keys.len() {
        env.grants = grants[i];
        let (c, r) = keys[i].0.run(env, |lock, op| {
            let t = lock.grant(Kind::RwLock, op, w);
            lock.promote(Kind::RwLock, op);
            t
        });
        changes[i].append(c);
        match r {
            Ok(t) => tokens.push(t),
            Err(error) => {
                for j in 0..i {
                    env.grants = grants[j];
                    let (c, ()) = keys[j].0.run(env, |lock, op| {
                        let owner = w.owner.clone();
                        lock.emit(op, crate::Effect::Release { owner });
                        lock.promote(Kind::RwLock, op);
                    });
                    changes[j].append(c);
                }
                return Err(MultiError { key: i, error });
            }
        }
    }
    Ok(tokens)
}

/// `RWLOCK.MLOCK`: `keys` in the request's order (distinct). The changes are each key's.
pub fn mlock(
    keys: &mut [&mut RwLock],
    grants: &[Grants],
    req: &MultiRequest,
    env: &mut Env,
) -> (Vec<Changes>, Result<MultiAcquire, MultiError>) {
    let mut changes = tick_all(keys, grants, env);
    // Grantable now only where every key's grants are open.
    env.grants = all(grants);
    let mut plans = Vec::with_capacity(keys.len());
    for (i, k) in keys.iter().enumerate() {
        match plan(&k.0, req, env) {
            Ok(p) => plans.push(p),
            Err(error) => return (changes, Err(MultiError { key: i, error })),
        }
    }
    let w = waiter(req);
    if plans.iter().all(|p| !matches!(p, Plan::Wait { .. })) {
        let out = grant_all(keys, grants, &w, env, &mut changes).map(MultiAcquire::Granted);
        return (changes, out);
    }
    if req.wait.is_none() {
        return (changes, Ok(MultiAcquire::Busy));
    }
    for (i, (k, p)) in keys.iter().zip(&plans).enumerate() {
        if matches!(p, Plan::Wait { .. }) && k.0.waiter_count() >= req.max_waiters {
            let error = LockError::TooManyWaiters(req.max_waiters);
            return (changes, Err(MultiError { key: i, error }));
        }
    }
    for (k, p) in keys.iter_mut().zip(&plans) {
        // A key free for it now is queued too, so nobody overtakes it there.
        if let Plan::Now { upgrade } | Plan::Wait { upgrade } = p {
            k.0.enqueue(w.clone(), *upgrade);
        }
    }
    (changes, Ok(MultiAcquire::Queued))
}

/// Whether the parked request `req` (its waiter id in `req.wait`) is at the head of every
/// key it waits on and grantable there, and the owner still holds the keys it did not wait
/// on; if so, grants it on every key. A key it held and lost meanwhile gets it queued there,
/// in its arrival place.
pub fn grant_ready(
    keys: &mut [&mut RwLock],
    grants: &[Grants],
    req: &MultiRequest,
    env: &mut Env,
) -> (Vec<Changes>, Ready) {
    let id = req.wait.map_or(0, |w| w.id);
    let w = waiter(req);
    let open = all(grants) == Grants::Open;
    let mut changes: Vec<Changes> = Vec::with_capacity(keys.len());
    let mut ready = true;
    let mut refusal = None;
    let mut ended = false;
    for (i, k) in keys.iter_mut().enumerate() {
        env.grants = grants[i];
        let (mut c, ok) = k.0.run(env, |lock, op| {
            // Lets time pass on the key as its timer would have (lapses, waits that ended, in
            // order), serving whoever is ahead and may be served. A key that was not free for
            // the request when its wait ran out ends its wait everywhere.
            lock.step(Kind::RwLock, op);
            if op.changes.timed_out.contains(&id) {
                ended = true;
                return Ok(false);
            }
            let queued = lock.queue.as_ref().and_then(|q| q.get(id)).is_some();
            if !queued {
                match lock.holders.get(&w.owner) {
                    Some(h) if w.mode == Mode::Read || h.writes > 0 => {
                        let deadline = op.env.deadline(w.ttl);
                        if deadline > h.deadline && h.passes_cap(deadline) {
                            let left = op.env.left(h.cap);
                            return Err(MultiError {
                                key: i,
                                error: LockError::MaxHold { left },
                            });
                        }
                        return Ok(true);
                    }
                    held => {
                        let upgrade = held.is_some();
                        lock.enqueue(w.clone(), upgrade);
                        lock.promote(Kind::RwLock, op);
                    }
                }
            }
            let Some(q) = lock.queue.as_ref() else {
                return Ok(false);
            };
            let head = q.head().is_some_and(|h| h.id == id);
            let admit = admissible(&lock.holders, lock.limit, Kind::RwLock, &w.owner, w.mode, 1);
            Ok(head && open && admit.is_some())
        });
        c.ready.retain(|r| *r != id);
        changes.push(c);
        match ok {
            Ok(true) => {}
            Ok(false) => ready = false,
            Err(e) => refusal = refusal.or(Some(e)),
        }
    }
    if ended {
        // Answered once, as timed out (by the first key that says so).
        let mut seen = false;
        for ((k, c), g) in keys.iter_mut().zip(changes.iter_mut()).zip(grants) {
            env.grants = *g;
            let (more, _) = k.cancel(id, env);
            c.append(more);
            if seen {
                c.timed_out.retain(|t| *t != id);
            }
            seen = seen || c.timed_out.contains(&id);
        }
        return (changes, Ready::NotYet);
    }
    if let Some(e) = refusal {
        for ((k, c), g) in keys.iter_mut().zip(changes.iter_mut()).zip(grants) {
            env.grants = *g;
            let (more, _) = k.cancel(id, env);
            c.append(more);
        }
        return (changes, Ready::Refused(e));
    }
    if !ready {
        return (changes, Ready::NotYet);
    }
    for k in keys.iter_mut() {
        if let Some(q) = k.0.queue.as_mut() {
            q.cancel(id);
        }
    }
    match grant_all(keys, grants, &w, env, &mut changes) {
        Ok(tokens) => (changes, Ready::Granted(tokens)),
        Err(e) => (changes, Ready::Refused(e)),
    }
}

/// `RWLOCK.MUNLOCK`: one hold of `owner` on each key; how many keys had one.
pub fn munlock(
    keys: &mut [&mut RwLock],
    grants: &[Grants],
    owner: &Id,
    env: &mut Env,
) -> (Vec<Changes>, usize) {
    let mut n = 0;
    let changes = keys
        .iter_mut()
        .zip(grants)
        .map(|(k, g)| {
            env.grants = *g;
            let (c, done) = k.unlock(owner, env);
            n += usize::from(done);
            c
        })
        .collect();
    (changes, n)
}

/// `RWLOCK.MRENEW`: `owner`'s holds on each key last `ttl` from now; how many keys it held.
/// If that passes any hold's cap, nothing is renewed and the answer is `MaxHold` with the
/// fewest ms left.
pub fn mrenew(
    keys: &mut [&mut RwLock],
    grants: &[Grants],
    owner: &Id,
    ttl: u64,
    env: &mut Env,
) -> (Vec<Changes>, Result<usize, LockError>) {
    let changes = tick_all(keys, grants, env);
    let deadline = env.deadline(ttl);
    let left = keys
        .iter()
        .filter_map(|k| k.0.hold_of(owner, env.now))
        .filter(|h| h.passes_cap(deadline))
        .map(|h| env.left(h.cap))
        .min();
    if let Some(left) = left {
        return (changes, Err(LockError::MaxHold { left }));
    }
    let mut changes = changes;
    let mut n = 0;
    for ((k, c), g) in keys.iter_mut().zip(changes.iter_mut()).zip(grants) {
        env.grants = *g;
        let (more, r) = k.try_renew(owner, ttl, env);
        c.append(more);
        n += usize::from(matches!(r, Ok(Some(_))));
    }
    (changes, Ok(n))
}
