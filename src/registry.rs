//! Who waits: each waiter id the core queues maps to a parked client here (by an opaque
//! handle; the waiters service turns it into Redis's blocked client). Pure data.

use std::collections::HashMap;

/// The registry's maps: foldhash, seeded per process (owner ids are the clients' choice), at a
/// fraction of SipHash's cost: every grant and hand-off looks waiters up here.
type Map<K, V> = HashMap<K, V, foldhash::quality::RandomState>;

use redis_lease_core::{Id, Kind, Mode, Ms, Waiter};

use crate::index::Slot;

/// An opaque handle of a blocked client (its address).
pub type Client = usize;

/// A parked request.
#[derive(Debug)]
pub struct Rec {
    pub client: Client,
    /// The key it waits on (a multi-key request: its first key).
    pub slot: Slot,
    pub since: Ms,
    /// Who waits (for the wait-for graph).
    pub owner: Id,
    /// A multi-key request's other keys.
    pub more: Vec<Slot>,
}

/// A parked multi-key request: what granting it needs besides its queued waiters.
#[derive(Clone, Debug)]
pub struct Group {
    pub db: i32,
    /// Its keys, in the request's order.
    pub names: Vec<Box<[u8]>>,
    pub owner: Id,
    pub mode: Mode,
    pub ttl: u64,
    pub max_hold: u64,
    pub until: Option<Ms>,
}

/// Waiters whose key went away; what becomes of them depends on why (a flush answers them
/// LOCKGONE, a reload or an eviction parks them again).
#[derive(Debug)]
pub struct Orphans {
    pub db: i32,
    pub name: Box<[u8]>,
    pub waiters: Vec<Waiter>,
    /// Taken out of a key of this kind by a flush, which a reload (`DEBUG RELOAD`) may undo:
    /// the waiters then queue again in the key that comes back, if it is of this kind. `None`:
    /// the key was deleted, evicted, renamed or moved (they are answered as such).
    pub flushed: Option<Kind>,
}

#[derive(Debug, Default)]
pub struct Registry {
    next_id: u64,
    by_id: Map<u64, Rec>,
    by_client: Map<Client, u64>,
    /// The waiting ids of each owner (for the wait-for graph).
    by_owner: Map<Id, Vec<u64>>,
    /// Waiters that left (disconnected) but are still in their key's queue: taken out the
    /// next time the key is touched where replication is allowed.
    cancels: Vec<(Slot, u64)>,
    /// Waiters of keys that were just deleted, flushed or evicted.
    orphans: Vec<Orphans>,
    /// The parked multi-key requests, by waiter id.
    groups: Map<u64, Group>,
    /// Multi-key requests a key reported ready (see `groups::drain`).
    ready: Vec<u64>,
}

impl Registry {
    /// A fresh waiter id (ids grow with arrival, which is the queue's order).
    pub fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    pub fn insert(&mut self, id: u64, rec: Rec) {
        self.by_client.insert(rec.client, id);
        self.by_owner.entry(rec.owner.clone()).or_default().push(id);
        self.by_id.insert(id, rec);
    }

    fn unindex_owner(&mut self, id: u64, owner: &Id) {
        if let Some(ids) = self.by_owner.get_mut(owner) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.by_owner.remove(owner);
            }
        }
    }

    /// The waiting ids of `owner`.
    pub fn ids_of_owner(&self, owner: &Id) -> &[u64] {
        self.by_owner.get(owner).map_or(&[], |v| v.as_slice())
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
        self.unindex_owner(id, &rec.owner);
        self.groups.remove(&id);
        // A multi-key request's other queues drop it the next time each is touched.
        for s in &rec.more {
            self.cancels.push((*s, id));
        }
        if !rec.more.is_empty() {
            self.cancels.push((rec.slot, id));
        }
        Some(rec)
    }

    /// The client left: takes its record out and remembers to take it out of its queue.
    pub fn leave(&mut self, client: Client) -> Option<(u64, Rec)> {
        let id = self.by_client.remove(&client)?;
        let rec = self.by_id.remove(&id)?;
        self.unindex_owner(id, &rec.owner);
        self.groups.remove(&id);
        self.cancels.push((rec.slot, id));
        for s in &rec.more {
            self.cancels.push((*s, id));
        }
        Some((id, rec))
    }

    /// Waiter `id` (parked) is a multi-key request.
    pub fn add_group(&mut self, id: u64, g: Group) {
        if self.by_id.contains_key(&id) {
            self.groups.insert(id, g);
        }
    }

    pub fn group(&self, id: u64) -> Option<&Group> {
        self.groups.get(&id)
    }

    /// Multi-key requests some key reported ready.
    pub fn push_ready(&mut self, ids: &[u64]) {
        self.ready.extend(
            ids.iter()
                .copied()
                .filter(|id| self.groups.contains_key(id)),
        );
    }

    pub fn pop_ready(&mut self) -> Option<u64> {
        self.ready.pop()
    }

    /// Multi-key request `id` was just looked at on every key and is not ready: a report of
    /// it still listed is stale (a key taken out of the lobby for that look reports its head
    /// again).
    pub fn unready(&mut self, id: u64) {
        self.ready.retain(|r| *r != id);
    }

    /// Waiter `id`'s key `name` in `db` has a new index entry `slot` (its state moved to or
    /// from the lobby, or came back after a reload). A multi-key request's entries follow its
    /// keys' order (`Group::names`): only that key's entry changes.
    pub fn rebind(&mut self, id: u64, (db, name): (i32, &[u8]), slot: Slot) {
        let Some(r) = self.by_id.get_mut(&id) else {
            return;
        };
        let at = self
            .groups
            .get(&id)
            .filter(|g| g.db == db)
            .and_then(|g| g.names.iter().position(|n| **n == *name));
        match at {
            Some(i) if i > 0 => {
                if let Some(s) = r.more.get_mut(i - 1) {
                    *s = slot;
                }
            }
            _ => r.slot = slot,
        }
    }

    /// SWAPDB: parked multi-key requests' keys now live in the other db.
    pub fn swap_dbs(&mut self, a: i32, b: i32) {
        for g in self.groups.values_mut() {
            if g.db == a {
                g.db = b;
            } else if g.db == b {
                g.db = a;
            }
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
