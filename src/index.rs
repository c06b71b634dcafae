//! The module's own index of its keys: one entry per key of its types (and per name whose
//! waiters are parked while grants are held), holding the key's db and name and the next time
//! the timer must look at it. A value knows its entry by a [`Slot`]; the index follows the key
//! through RENAME, MOVE and SWAPDB and drops entries when keys go, by any route. Pure data: the
//! schedule service arms Redis's timer from it.

use std::collections::BTreeSet;

use redis_lease_core::Ms;

/// A value's handle on its index entry. The generation tells a reused entry from the one the
/// handle was made for, so a stale handle never touches another key's entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot {
    id: u32,
    /// 0: no entry.
    gen: u32,
}

impl Slot {
    pub const NONE: Slot = Slot { id: 0, gen: 0 };

    pub fn is_none(self) -> bool {
        self.gen == 0
    }
}

#[derive(Debug)]
struct Entry {
    gen: u32,
    db: i32,
    /// When to look again (0: not scheduled).
    when: Ms,
    /// `None`: the entry is free.
    name: Option<Box<[u8]>>,
}

/// Where an entry's key lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place<'a> {
    pub db: i32,
    pub name: &'a [u8],
}

#[derive(Debug, Default)]
pub struct Index {
    entries: Vec<Entry>,
    free: Vec<u32>,
    timers: BTreeSet<(Ms, u32)>,
    live: usize,
}

impl Index {
    /// A new entry for the key `name` in `db`.
    pub fn attach(&mut self, db: i32, name: &[u8]) -> Slot {
        self.live += 1;
        let name = Some(Box::<[u8]>::from(name));
        if let Some(id) = self.free.pop() {
            let e = &mut self.entries[id as usize];
            e.gen = e.gen.wrapping_add(1).max(1);
            e.db = db;
            e.when = 0;
            e.name = name;
            return Slot { id, gen: e.gen };
        }
        let id = self.entries.len() as u32;
        self.entries.push(Entry {
            gen: 1,
            db,
            when: 0,
            name,
        });
        Slot { id, gen: 1 }
    }

    fn entry(&self, slot: Slot) -> Option<&Entry> {
        let e = self.entries.get(slot.id as usize)?;
        (e.gen == slot.gen && e.name.is_some() && !slot.is_none()).then_some(e)
    }

    fn entry_mut(&mut self, slot: Slot) -> Option<&mut Entry> {
        let e = self.entries.get_mut(slot.id as usize)?;
        (e.gen == slot.gen && e.name.is_some() && !slot.is_none()).then_some(e)
    }

    /// Whether `slot` names a live entry.
    #[cfg(test)]
    pub fn contains(&self, slot: Slot) -> bool {
        self.entry(slot).is_some()
    }

    /// Where the slot's key lives.
    pub fn place(&self, slot: Slot) -> Option<Place<'_>> {
        let e = self.entry(slot)?;
        Some(Place {
            db: e.db,
            name: e.name.as_deref()?,
        })
    }

    /// Whether `slot` is the entry of `name` in `db`.
    pub fn is_at(&self, slot: Slot, db: i32, name: &[u8]) -> bool {
        self.place(slot) == Some(Place { db, name })
    }

    /// Frees the entry (no-op for a stale handle); true if it was live.
    pub fn detach(&mut self, slot: Slot) -> bool {
        let Some(e) = self.entry_mut(slot) else {
            return false;
        };
        let when = std::mem::take(&mut e.when);
        e.name = None;
        if when != 0 {
            self.timers.remove(&(when, slot.id));
        }
        self.free.push(slot.id);
        self.live -= 1;
        true
    }

    /// Makes the timer look at the slot's key at `when` (`None`: not at all).
    pub fn schedule(&mut self, slot: Slot, when: Option<Ms>) {
        let Some(e) = self.entry_mut(slot) else {
            return;
        };
        let new = when.unwrap_or(0);
        let old = std::mem::replace(&mut e.when, new);
        if old == new {
            return;
        }
        if old != 0 {
            self.timers.remove(&(old, slot.id));
        }
        if new != 0 {
            self.timers.insert((new, slot.id));
        }
    }

    /// The earliest scheduled time.
    pub fn first_due(&self) -> Option<Ms> {
        self.timers.first().map(|t| t.0)
    }

    /// Takes the earliest entry due at or before `now` off the schedule.
    pub fn pop_due(&mut self, now: Ms) -> Option<Slot> {
        let &(when, id) = self.timers.first()?;
        if when > now {
            return None;
        }
        self.timers.pop_first();
        let e = &mut self.entries[id as usize];
        e.when = 0;
        Some(Slot { id, gen: e.gen })
    }

    /// The key moved to `name` in `db` (RENAME, MOVE).
    pub fn relocate(&mut self, slot: Slot, db: i32, name: &[u8]) {
        if let Some(e) = self.entry_mut(slot) {
            e.db = db;
            e.name = Some(name.into());
        }
    }

    /// `SWAPDB a b`: every key of one db is now in the other.
    pub fn swap_dbs(&mut self, a: i32, b: i32) {
        for e in self.entries.iter_mut().filter(|e| e.name.is_some()) {
            if e.db == a {
                e.db = b;
            } else if e.db == b {
                e.db = a;
            }
        }
    }

    /// Every live slot in `db` (`None`: in every db).
    pub fn slots_in(&self, db: Option<i32>) -> Vec<Slot> {
        self.entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.name.is_some() && db.is_none_or(|d| d == e.db))
            .map(|(id, e)| Slot {
                id: id as u32,
                gen: e.gen,
            })
            .collect()
    }

    /// How many live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    /// How many entries are scheduled.
    pub fn scheduled(&self) -> usize {
        self.timers.len()
    }

    /// Heap bytes held (for INFO): the entry table, the names and the schedule.
    pub fn heap_bytes(&self) -> usize {
        let names: usize = self
            .entries
            .iter()
            .filter_map(|e| e.name.as_ref().map(|n| n.len().max(8)))
            .sum();
        self.entries.capacity() * std::mem::size_of::<Entry>()
            + self.free.capacity() * 4
            + self.timers.len() * 24
            + names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_follow_their_keys_and_stale_handles_touch_nothing() {
        let mut ix = Index::default();
        let a = ix.attach(0, b"a");
        let b = ix.attach(1, b"b");
        assert_eq!(ix.len(), 2);
        ix.schedule(a, Some(10));
        ix.schedule(b, Some(5));
        assert_eq!(ix.first_due(), Some(5));
        ix.schedule(b, Some(20));
        assert_eq!(ix.first_due(), Some(10));
        ix.swap_dbs(0, 1);
        assert!(ix.is_at(a, 1, b"a") && ix.is_at(b, 0, b"b"));
        ix.relocate(a, 3, b"c");
        assert_eq!(ix.place(a), Some(Place { db: 3, name: b"c" }));
        assert!(ix.detach(a));
        assert!(!ix.detach(a));
        assert_eq!(ix.scheduled(), 1);
        // The freed entry is reused; the old handle stays dead.
        let c = ix.attach(0, b"x");
        assert_ne!(c, a);
        assert!(!ix.contains(a) && ix.contains(c));
        ix.schedule(a, Some(1));
        assert_eq!(ix.first_due(), Some(20));
        assert_eq!(ix.pop_due(19), None);
        assert_eq!(ix.pop_due(20), Some(b));
        assert_eq!(ix.scheduled(), 0);
        assert_eq!(ix.slots_in(Some(0)), vec![c, b]);
        assert!(!ix.contains(Slot::NONE));
    }
}
