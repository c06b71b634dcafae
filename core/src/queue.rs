use std::collections::{BTreeMap, BTreeSet};

use crate::id::Id;
use crate::{Mode, Ms};

/// A request parked in a key's queue. `id` is chosen by the shell, increasing with arrival,
/// so the queue orders waiters by id; the shell maps it back to the blocked client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub id: u64,
    pub owner: Id,
    pub mode: Mode,
    /// Permits asked for (semaphores; 1 for locks and elections).
    pub permits: u32,
    /// The lease the waiter asked for, in ms; its deadline counts from the grant.
    pub ttl: u64,
    /// When the wait ends without a grant, on the monotonic clock (`None`: it waits without
    /// a limit).
    pub until: Option<Ms>,
    /// The most ms the hold may last from its grant, renewals included (0: no cap).
    pub max_hold: u64,
    /// One key of a multi-key request: the key stops at it when it is at the head, and the
    /// shell grants it together with its other keys (see `multi`).
    pub group: bool,
}

/// The waiters of one key: a reader waiting to upgrade (it already holds, so it goes first),
/// then everyone else in arrival order. Wait deadlines are indexed, so the earliest one is
/// found without a scan, and so are the write requests by owner (for the upgrade check).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    upgrade: Option<Waiter>,
    fifo: BTreeMap<u64, Waiter>,
    untils: BTreeSet<(Ms, u64)>,
    /// Ids of the write requests in `fifo`, by owner.
    writes: BTreeMap<Id, BTreeSet<u64>>,
    /// The owners in `writes` that hold the key now (kept up to date by the lock through
    /// [`Queue::holder_changed`]): the readers that also wait for the write lock.
    held_writers: BTreeSet<Id>,
}

impl Queue {
    pub fn len(&self) -> usize {
        self.fifo.len() + usize::from(self.upgrade.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.upgrade.is_none() && self.fifo.is_empty()
    }

    pub fn upgrade(&self) -> Option<&Waiter> {
        self.upgrade.as_ref()
    }

    /// The next waiter to serve: the upgrade, else the earliest arrival.
    pub fn head(&self) -> Option<&Waiter> {
        self.upgrade.as_ref().or_else(|| self.fifo.values().next())
    }

    /// Takes the head out (see [`Queue::head`]).
    pub fn pop_head(&mut self) -> Option<Waiter> {
        let w = match self.upgrade.take() {
            Some(w) => w,
            None => self.fifo.pop_first()?.1,
        };
        self.unindex(&w);
        Some(w)
    }

    /// Parks `w` in arrival order; `holds`: its owner holds the key now. A waiter with the
    /// same id (the shell never reuses one) is replaced, indexes included.
    pub fn push(&mut self, w: Waiter, holds: bool) {
        self.cancel(w.id);
        if holds && w.mode == Mode::Write {
            self.held_writers.insert(w.owner.clone());
        }
        self.index(&w, true);
        self.fifo.insert(w.id, w);
    }

    /// `owner` became a holder (`holds`) or stopped being one.
    pub fn holder_changed(&mut self, owner: &Id, holds: bool) {
        if !holds {
            self.held_writers.remove(owner);
        } else if self.writes.contains_key(owner) {
            self.held_writers.insert(owner.clone());
        }
    }

    /// The owners that hold the key and also wait for the write lock in arrival order.
    pub fn held_writers(&self) -> impl Iterator<Item = &Id> {
        self.held_writers.iter()
    }

    /// Parks `w` in the upgrade slot, which must be free.
    pub fn push_upgrade(&mut self, w: Waiter) {
        debug_assert!(self.upgrade.is_none());
        self.cancel(w.id);
        self.index(&w, false);
        self.upgrade = Some(w);
    }

    /// Removes waiter `id`, if it is here.
    pub fn cancel(&mut self, id: u64) -> Option<Waiter> {
        let w = if self.upgrade.as_ref().is_some_and(|w| w.id == id) {
            self.upgrade.take()?
        } else {
            self.fifo.remove(&id)?
        };
        self.unindex(&w);
        Some(w)
    }

    /// The earliest wait deadline, and whose.
    pub fn first_until(&self) -> Option<(Ms, u64)> {
        self.untils.first().copied()
    }

    /// Drops the waiters at the head of each line that `alive` says are gone: a departed
    /// upgrade, and departed waiters at the front of the arrival order (so that whichever line
    /// serves next, its first waiter is alive).
    pub fn skip_dead(&mut self, alive: &dyn Fn(u64) -> bool) {
        if let Some(id) = self.upgrade.as_ref().map(|w| w.id).filter(|id| !alive(*id)) {
            self.cancel(id);
        }
        while let Some(id) = self.fifo.keys().next().copied().filter(|id| !alive(*id)) {
            self.cancel(id);
        }
    }

    /// Puts a waiting upgrade back in arrival order (its owner no longer holds a read lock,
    /// so it is an ordinary write request and has no right to go first).
    pub fn demote_upgrade(&mut self) {
        if let Some(w) = self.upgrade.take() {
            self.unindex(&w);
            self.push(w, false);
        }
    }

    /// Every waiter, upgrade first, then in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.upgrade.iter().chain(self.fifo.values())
    }

    /// Every waiter, in the same order, leaving the queue empty.
    pub fn drain(&mut self) -> Vec<Waiter> {
        let mut out: Vec<Waiter> = self.upgrade.take().into_iter().collect();
        out.extend(std::mem::take(&mut self.fifo).into_values());
        self.untils.clear();
        self.writes.clear();
        self.held_writers.clear();
        out
    }

    /// Waiter `id`, if it is here.
    pub fn get(&self, id: u64) -> Option<&Waiter> {
        match &self.upgrade {
            Some(w) if w.id == id => Some(w),
            _ => self.fifo.get(&id),
        }
    }

    /// The waiters served before waiter `id` (which is here), skipping the first `after`
    /// (the upgrade, if `after` is set, then arrival order up to id `after`): what a
    /// wait-for graph walk has not looked at yet.
    pub fn ahead_of(&self, id: u64, after: Option<u64>) -> impl Iterator<Item = &Waiter> {
        let is_upgrade = self.upgrade.as_ref().is_some_and(|w| w.id == id);
        let upgrade = self
            .upgrade
            .iter()
            .filter(move |_| after.is_none() && !is_upgrade);
        let from = after.map_or(0, |a| a.saturating_add(1));
        let to = if is_upgrade { 0 } else { id };
        let fifo = (from < to)
            .then(|| self.fifo.range(from..to))
            .into_iter()
            .flatten();
        upgrade.chain(fifo.map(|(_, w)| w))
    }

    /// The ids of `owner`'s write requests waiting in arrival order.
    pub fn writes_of(&self, owner: &Id) -> Option<&BTreeSet<u64>> {
        self.writes.get(owner)
    }

    fn index(&mut self, w: &Waiter, fifo: bool) {
        if let Some(u) = w.until {
            self.untils.insert((u, w.id));
        }
        if fifo && w.mode == Mode::Write {
            self.writes.entry(w.owner.clone()).or_default().insert(w.id);
        }
    }

    fn unindex(&mut self, w: &Waiter) {
        if let Some(u) = w.until {
            self.untils.remove(&(u, w.id));
        }
        if w.mode == Mode::Write {
            if let Some(ids) = self.writes.get_mut(&w.owner) {
                ids.remove(&w.id);
                if ids.is_empty() {
                    self.writes.remove(&w.owner);
                    self.held_writers.remove(&w.owner);
                }
            }
        }
    }

    /// Heap bytes, each allocation rounded by `round` (an estimate).
    pub fn heap_bytes(&self, round: &dyn Fn(usize) -> usize) -> usize {
        round(std::mem::size_of::<Queue>())
            + self
                .iter()
                .map(|w| std::mem::size_of::<Waiter>() + 48 + round(w.owner.heap_len()))
                .sum::<usize>()
    }
}
