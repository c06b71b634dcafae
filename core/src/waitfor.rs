//! Deadlocks found by the server: the wait-for graph between owners, across every key of
//! every kind in every db, walked only when a request is about to wait.
//!
//! A parked request waits for each holder (an owner) that excludes it (a writer, for a
//! reader; any other holder, for a writer; for a semaphore, a holder whose permits alone leave
//! no room) and for each request queued ahead of it on its key (queues are strictly FIFO, so
//! it is not served before them). An owner waits while any of its requests waits: it cannot
//! release meanwhile. Each edge is a wait only its end can end, so a path from a new request
//! back to its owner (or to itself) is a real deadlock: no false positives. Requests, not
//! owners, are the nodes of queue edges: an owner's request ahead of another's waits only for
//! what that request waits for. (A semaphore holder whose permits alone would leave room is
//! no edge: another holder's release could serve the request.)
//!
//! The walk folds single-key requests queued ahead into one pass over each key's queue (they
//! wait for nothing else), so a walk costs about the holders and waiters of the keys it
//! reaches, and gives up, refusing nothing, past [`MAX_NODES`] nodes.

use std::collections::HashSet;
use std::hash::Hash;

use crate::id::Id;
use crate::lock::{Kind, Lock};
use crate::queue::Waiter;
use crate::{Mode, Ms};

/// The server as the walk sees it: who waits where, and each key's state.
pub trait Graph {
    /// A key, across dbs.
    type Key: Clone + Eq + Hash;

    /// The waiter ids of every parked request of `owner`.
    fn waits(&self, owner: &Id) -> Vec<u64>;

    /// The keys request `id` waits on (several for a multi-key request).
    fn keys_of(&self, id: u64) -> Vec<Self::Key>;

    /// Calls `f` with the key's kind and state; false if there is no such key.
    fn with_lock(&self, key: &Self::Key, f: &mut dyn FnMut(Kind, &Lock)) -> bool;

    /// Whether waiter `id` still belongs to a connected client.
    fn alive(&self, id: u64) -> bool;
}

/// What one node of the graph waits for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Node {
    /// An owner: it waits while any of its requests waits (it cannot release meanwhile).
    Owner(Id),
    /// One parked request (on each of its keys): it waits for the holders that exclude it and
    /// for every request queued ahead of it there.
    Request(u64),
}

/// The most nodes one walk looks at: past it the walk gives up and refuses nothing (no false
/// positive; a deadlock in a graph that large is left to the waits' own deadlines).
pub const MAX_NODES: usize = 10_000;

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

/// Whether a holder (with these counts) alone keeps a request of `need` from being granted.
fn excludes(kind: Kind, lock: &Lock, reads: u32, writes: u32, need: u32) -> bool {
    match kind {
        Kind::Semaphore => u64::from(reads) + u64::from(need) > u64::from(lock.limit()),
        _ => need == u32::MAX || writes > 0,
    }
}

/// The two largest needs of distinct owners (so that for any holder, the largest need of an
/// owner other than the holder is known).
#[derive(Default)]
struct TopTwo<'a> {
    first: Option<(u32, &'a Id)>,
    second: Option<(u32, &'a Id)>,
}

impl<'a> TopTwo<'a> {
    fn add(&mut self, need: u32, owner: &'a Id) {
        match self.first {
            Some((n, o)) if o == owner => {
                self.first = Some((n.max(need), o));
            }
            Some((n, _)) if need > n => {
                self.second = self.first;
                self.first = Some((need, owner));
            }
            None => self.first = Some((need, owner)),
            _ => match self.second {
                Some((n, o)) if o == owner || need <= n => {
                    if o == owner {
                        self.second = Some((n.max(need), o));
                    }
                }
                _ => self.second = Some((need, owner)),
            },
        }
    }

    /// The largest need of an owner other than `holder`.
    fn besides(&self, holder: &Id) -> Option<u32> {
        match (self.first, self.second) {
            (Some((n, o)), _) if o != holder => Some(n),
            (_, Some((n, _))) => Some(n),
            _ => None,
        }
    }
}

/// The nodes that request `id` of `lock` waits for on this key. A request queued ahead of it
/// that waits on this key alone waits only for this key's holders and for what is ahead of
/// it, so its need is folded into the holder check instead of walking it (a key with many
/// waiters costs one pass); a multi-key request ahead is a node of its own.
fn blockers(
    (kind, lock): (Kind, &Lock),
    id: u64,
    start: u64,
    now: Ms,
    alive: &dyn Fn(u64) -> bool,
    out: &mut Vec<Node>,
) {
    let Some(q) = lock.queue.as_ref() else { return };
    let Some(w) = q.get(id) else { return };
    let mut needs = TopTwo::default();
    needs.add(need(kind, w), &w.owner);
    for a in q.ahead_of(id, None) {
        if !alive(a.id) {
            continue;
        }
        if a.group || a.id == start {
            // (The walk's own request ahead: a path back to it is a cycle.)
            out.push(Node::Request(a.id));
        } else {
            needs.add(need(kind, a), &a.owner);
        }
    }
    for h in lock.live_holders(now) {
        let (r, wr) = (h.hold.reads, h.hold.writes);
        // Excluded by some request of another owner: a wait only this holder can end.
        if needs
            .besides(h.owner)
            .is_some_and(|n| excludes(kind, lock, r, wr, n))
        {
            out.push(Node::Owner(h.owner.clone()));
        }
    }
}

/// Whether parked request `id` of `owner` (just queued on `keys`) closes a cycle in the
/// wait-for graph: something it waits for waits, directly or through others, for `owner` or
/// for this request.
pub fn closes_cycle<G: Graph>(g: &G, owner: &Id, id: u64, keys: &[G::Key], now: Ms) -> bool {
    let alive = |id: u64| g.alive(id);
    // foldhash, not SipHash: the walk hashes every node it meets (ids clients chose, so a
    // seeded hasher all the same).
    let mut visited: HashSet<Node, foldhash::quality::RandomState> = HashSet::default();
    let target = Node::Owner(owner.clone());
    let start = Node::Request(id);
    let mut stack: Vec<Node> = Vec::new();
    let mut found = Vec::new();
    for key in keys {
        g.with_lock(key, &mut |kind, lock| {
            blockers((kind, lock), id, id, now, &alive, &mut found)
        });
    }
    loop {
        for n in found.drain(..) {
            if n == target || n == start {
                return true;
            }
            if visited.len() >= MAX_NODES {
                return false;
            }
            if visited.insert(n.clone()) {
                stack.push(n);
            }
        }
        let Some(n) = stack.pop() else {
            return false;
        };
        match n {
            Node::Owner(p) => found.extend(g.waits(&p).into_iter().map(Node::Request)),
            Node::Request(r) => {
                for key in g.keys_of(r) {
                    g.with_lock(&key, &mut |kind, lock| {
                        blockers((kind, lock), r, id, now, &alive, &mut found)
                    });
                }
            }
        }
    }
}
