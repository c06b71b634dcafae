//! Deadlocks found by the server: the wait-for graph between owners, across every key of
//! every kind in every db, walked only when a request is about to wait.
//!
//! Owner O waits for owner P when one of O's parked requests cannot be granted while P stays
//! as it is: P holds the key in a way that excludes O's request (a writer, for a reader;
//! any other holder, for a writer; for a semaphore, a holder whose permits alone leave no
//! room), or P has a request queued ahead of O's on that key (queues are strictly FIFO, so O
//! is not served before it). Each such edge is a wait that only P can end, so a cycle back
//! to O is a real deadlock: no false positives. (A semaphore holder whose permits alone
//! would leave room is no edge: another holder's release could serve O.)
//!
//! The walk looks at each key's holders and queue prefix once, however many of the owners it
//! visits wait there, so it costs about the number of holders and waiters it reaches.

use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::id::Id;
use crate::lock::{Kind, Lock};
use crate::queue::Waiter;
use crate::{Mode, Ms};

/// The server as the walk sees it: who waits where, and each key's state.
pub trait Graph {
    /// A key, across dbs.
    type Key: Clone + Eq + Hash;

    /// Every parked request of `owner`: its key and waiter id.
    fn waits(&self, owner: &Id) -> Vec<(Self::Key, u64)>;

    /// Calls `f` with the key's kind and state; false if there is no such key.
    fn with_lock(&self, key: &Self::Key, f: &mut dyn FnMut(Kind, &Lock)) -> bool;

    /// Whether waiter `id` still belongs to a connected client.
    fn alive(&self, id: u64) -> bool;
}

/// How much of one key the walk has seen: the queue up to a waiter id (`None`: not even
/// the upgrade slot), and the holders for requests up to a need (see [`need`]).
#[derive(Default)]
struct Seen {
    queue: Option<u64>,
    need: u32,
}

/// How much a waiter needs of a key, ordered so that a larger need is excluded by every
/// holder a smaller one is: a read request 1, a write request `u32::MAX`, a semaphore request
/// its permits.
fn need(kind: Kind, w: &Waiter) -> u32 {
    match (kind, w.mode) {
        (Kind::Semaphore, _) => w.permits,
        (_, Mode::Read) => 1,
        (_, Mode::Write) => u32::MAX,
    }
}

/// Whether holder `h` alone keeps a request of `need` from being granted.
fn excludes(kind: Kind, lock: &Lock, reads: u32, writes: u32, need: u32) -> bool {
    match kind {
        Kind::Semaphore => u64::from(reads) + u64::from(need) > u64::from(lock.limit()),
        _ => need == u32::MAX || writes > 0,
    }
}

/// The owners that waiter `id` of `lock` waits for, beyond what `memo` covers (updated).
/// No memo for the requester's own waits: the self edges they skip must not hide the
/// requester from later visitors.
fn blockers(
    (kind, lock): (Kind, &Lock),
    id: u64,
    now: Ms,
    alive: &dyn Fn(u64) -> bool,
    memo: Option<&mut Seen>,
    out: &mut Vec<Id>,
) {
    let mut fresh = Seen::default();
    let memo_on = memo.is_some();
    let seen = memo.unwrap_or(&mut fresh);
    let Some(q) = lock.queue.as_ref() else { return };
    let Some(w) = q.get(id) else { return };
    let need = need(kind, w);
    if need > seen.need {
        for h in lock.live_holders(now) {
            let (r, wr) = (h.hold.reads, h.hold.writes);
            if *h.owner != w.owner && excludes(kind, lock, r, wr, need) {
                out.push(h.owner.clone());
            }
        }
        if memo_on {
            seen.need = need;
        }
    }
    for a in q.ahead_of(id, seen.queue) {
        if a.owner != w.owner && alive(a.id) {
            out.push(a.owner.clone());
        }
    }
    if memo_on && q.upgrade().is_none_or(|u| u.id != id) {
        // Everything served before `id` has been seen now.
        let upto = id.saturating_sub(1);
        seen.queue = Some(seen.queue.map_or(upto, |q| q.max(upto)));
    }
}

/// Whether the parked requests `waits` of `owner` (just queued) close a cycle in the
/// wait-for graph: some owner they wait for waits, directly or through others, for `owner`.
pub fn closes_cycle<G: Graph>(g: &G, owner: &Id, waits: &[(G::Key, u64)], now: Ms) -> bool {
    let alive = |id: u64| g.alive(id);
    let mut seen: HashMap<G::Key, Seen> = HashMap::new();
    let mut visited: HashSet<Id> = HashSet::new();
    visited.insert(owner.clone());
    let mut stack: Vec<Id> = Vec::new();
    let mut found = Vec::new();
    for (key, id) in waits {
        g.with_lock(key, &mut |kind, lock| {
            blockers((kind, lock), *id, now, &alive, None, &mut found)
        });
    }
    for o in found.drain(..) {
        if visited.insert(o.clone()) {
            stack.push(o);
        }
    }
    while let Some(p) = stack.pop() {
        for (key, id) in g.waits(&p) {
            let s = seen.entry(key.clone()).or_default();
            g.with_lock(&key, &mut |kind, lock| {
                blockers((kind, lock), id, now, &alive, Some(&mut *s), &mut found)
            });
            for o in found.drain(..) {
                if o == *owner {
                    return true;
                }
                if visited.insert(o.clone()) {
                    stack.push(o);
                }
            }
        }
    }
    false
}
