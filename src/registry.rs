//! Who waits: each waiter id the core queues maps to a parked client here (by an opaque
//! handle; the waiters service turns it into Redis's blocked client). Pure data.

use std::collections::HashMap;

use redis_lease_core::{Ms, Waiter};

use crate::index::Slot;

/// An opaque handle of a blocked client (its address).
pub type Client = usize;

/// A parked request.
#[derive(Debug)]
pub struct Rec {
    pub client: Client,
    /// The key it waits on.
    pub slot: Slot,
    pub since: Ms,
}

/// Waiters whose key went away; what becomes of them depends on why (a flush answers them
/// LOCKGONE, a reload or an eviction parks them again).
#[derive(Debug)]
pub struct Orphans {
    pub db: i32,
    pub name: Box<[u8]>,
    pub waiters: Vec<Waiter>,
}

#[derive(Debug, Default)]
pub struct Registry {
    next_id: u64,
    by_id: HashMap<u64, Rec>,
    by_client: HashMap<Client, u64>,
    /// Waiters that left (disconnected) but are still in their key's queue: taken out the
    /// next time the key is touched where replication is allowed.
    cancels: Vec<(Slot, u64)>,
    /// Waiters of keys that were just deleted, flushed or evicted.
    orphans: Vec<Orphans>,
}

impl Registry {
    /// A fresh waiter id (ids grow with arrival, which is the queue's order).
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn insert(&mut self, id: u64, rec: Rec) {
        self.by_client.insert(rec.client, id);
        self.by_id.insert(id, rec);
    }

    pub fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    pub fn get(&self, id: u64) -> Option<&Rec> {
        self.by_id.get(&id)
    }

    /// Takes waiter `id` out (it is being answered).
    pub fn remove(&mut self, id: u64) -> Option<Rec> {
        let rec = self.by_id.remove(&id)?;
        self.by_client.remove(&rec.client);
        Some(rec)
    }

    /// The client left: takes its record out and remembers to take it out of its queue.
    pub fn leave(&mut self, client: Client) -> Option<(u64, Rec)> {
        let id = self.by_client.remove(&client)?;
        let rec = self.by_id.remove(&id)?;
        self.cancels.push((rec.slot, id));
        Some((id, rec))
    }

    /// Waiter `id` moved to another key entry (its key was parked while grants are held).
    pub fn rebind(&mut self, id: u64, slot: Slot) {
        if let Some(r) = self.by_id.get_mut(&id) {
            r.slot = slot;
        }
    }

    /// The departed waiters of one key.
    pub fn take_cancels_of(&mut self, slot: Slot) -> Vec<u64> {
        if self.cancels.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        self.cancels.retain(|(s, id)| {
            let mine = *s == slot;
            if mine {
                out.push(*id);
            }
            !mine
        });
        out
    }

    /// How many departed waiters of one key are still queued.
    pub fn cancels_of(&self, slot: Slot) -> usize {
        self.cancels.iter().filter(|(s, _)| *s == slot).count()
    }

    /// The keys of departed waiters still queued.
    pub fn cancel_slots(&self) -> Vec<Slot> {
        self.cancels.iter().map(|(s, _)| *s).collect()
    }

    /// Every departed waiter, by key.
    pub fn take_cancels(&mut self) -> Vec<(Slot, u64)> {
        std::mem::take(&mut self.cancels)
    }

    pub fn add_orphans(&mut self, o: Orphans) {
        if !o.waiters.is_empty() {
            self.orphans.push(o);
        }
    }

    pub fn take_orphans(&mut self) -> Vec<Orphans> {
        std::mem::take(&mut self.orphans)
    }

    /// The orphans of `name` in `db`, if any.
    pub fn take_orphans_of(&mut self, db: i32, name: &[u8]) -> Option<Orphans> {
        let i = self
            .orphans
            .iter()
            .position(|o| o.db == db && *o.name == *name)?;
        Some(self.orphans.remove(i))
    }

    /// Every waiting id whose key entry is `slot` (or every one with `None`).
    pub fn ids_of(&self, slot: Option<Slot>) -> Vec<u64> {
        self.by_id
            .iter()
            .filter(|(_, r)| slot.is_none_or(|s| s == r.slot))
            .map(|(id, _)| *id)
            .collect()
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }
}
