use std::collections::BTreeMap;

use crate::Mode;

/// A request parked in a key's queue. `id` is chosen by the shell, increasing with arrival,
/// so the queue orders waiters by id; the shell maps it back to the blocked client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Waiter {
    pub id: u64,
    pub owner: Box<[u8]>,
    pub mode: Mode,
    /// The lease the waiter asked for, in ms; its deadline counts from the grant.
    pub ttl: u64,
}

/// The waiters of one key: a reader waiting to upgrade (it already holds, so it goes first),
/// then everyone else in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub upgrade: Option<Waiter>,
    pub fifo: BTreeMap<u64, Waiter>,
}

impl Queue {
    pub fn len(&self) -> usize {
        self.fifo.len() + usize::from(self.upgrade.is_some())
    }

    pub fn is_empty(&self) -> bool {
        self.upgrade.is_none() && self.fifo.is_empty()
    }

    /// Removes waiter `id`; true if it was there.
    pub fn cancel(&mut self, id: u64) -> bool {
        if self.upgrade.as_ref().is_some_and(|w| w.id == id) {
            self.upgrade = None;
            return true;
        }
        self.fifo.remove(&id).is_some()
    }

    /// Drops waiters at the head that `alive` says are gone.
    pub fn skip_dead(&mut self, alive: &dyn Fn(u64) -> bool) {
        if self.upgrade.as_ref().is_some_and(|w| !alive(w.id)) {
            self.upgrade = None;
        }
        while let Some(entry) = self.fifo.first_entry() {
            if alive(*entry.key()) {
                break;
            }
            entry.remove();
        }
    }

    /// Puts a waiting upgrade back in arrival order (its owner no longer holds a read lock,
    /// so it is an ordinary write request and has no right to go first).
    pub fn demote_upgrade(&mut self) {
        if let Some(w) = self.upgrade.take() {
            self.fifo.insert(w.id, w);
        }
    }

    /// Every waiter, upgrade first, then in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = &Waiter> {
        self.upgrade.iter().chain(self.fifo.values())
    }
}
