//! The module's own index of its keys: one entry per key of its types (and per name whose
//! waiters are parked while grants are held), holding the key's db and name and the next time
//! the timer must look at it. A value knows its entry by a [`Slot`]; the index follows the key
//! through RENAME, MOVE and SWAPDB and drops entries when keys go, by any route. Pure data: the
//! schedule service arms Redis's timer from it.
//!
//! Memory is per key: entries live in fixed-size chunks (no doubling waste), names up to 22
//! bytes inline, and the schedule links entries into one list per millisecond (no tree node
//! per key; a tree holds only the distinct times, which are few).

use std::collections::BTreeMap;

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

const INLINE: usize = 22;

/// A key name: inline when short.
#[derive(Clone, Debug)]
enum Name {
    Free,
    Inline { len: u8, buf: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl Name {
    fn new(b: &[u8]) -> Name {
        if b.len() <= INLINE {
            let mut buf = [0u8; INLINE];
            buf[..b.len()].copy_from_slice(b);
            Name::Inline {
                len: b.len() as u8,
                buf,
            }
        } else {
            Name::Heap(b.into())
        }
    }

    fn bytes(&self) -> Option<&[u8]> {
        match self {
            Name::Free => None,
            Name::Inline { len, buf } => Some(&buf[..usize::from(*len)]),
            Name::Heap(b) => Some(b),
        }
    }

    fn heap_len(&self) -> usize {
        match self {
            Name::Heap(b) => b.len(),
            _ => 0,
        }
    }
}

/// No neighbour in a list.
const NIL: u32 = u32::MAX;

#[derive(Debug)]
struct Entry {
    gen: u32,
    db: i32,
    /// When to look again (0: not scheduled).
    when: Ms,
    /// Neighbours in the list of `when`.
    prev: u32,
    next: u32,
    name: Name,
}

/// Where an entry's key lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place<'a> {
    pub db: i32,
    pub name: &'a [u8],
}

const CHUNK: usize = 1024;

#[derive(Debug, Default)]
pub struct Index {
    chunks: Vec<Box<[Entry]>>,
    len: u32,
    free: Vec<u32>,
    /// The first entry of each scheduled time's list.
    times: BTreeMap<Ms, u32>,
    live: usize,
    scheduled: usize,
}

impl Index {
    fn at(&self, id: u32) -> &Entry {
        &self.chunks[id as usize / CHUNK][id as usize % CHUNK]
    }

    fn at_mut(&mut self, id: u32) -> &mut Entry {
        &mut self.chunks[id as usize / CHUNK][id as usize % CHUNK]
    }

    /// A new entry for the key `name` in `db`.
    pub fn attach(&mut self, db: i32, name: &[u8]) -> Slot {
        self.live += 1;
        let id = match self.free.pop() {
            Some(id) => id,
            None => {
                let id = self.len;
                if id as usize == self.chunks.len() * CHUNK {
                    let chunk = (0..CHUNK).map(|_| Entry {
                        gen: 0,
                        db: 0,
                        when: 0,
                        prev: NIL,
                        next: NIL,
                        name: Name::Free,
                    });
                    self.chunks.push(chunk.collect());
                }
                self.len += 1;
                id
            }
        };
        let e = self.at_mut(id);
        e.gen = e.gen.wrapping_add(1).max(1);
        e.db = db;
        e.when = 0;
        e.name = Name::new(name);
        Slot { id, gen: e.gen }
    }

    fn live_id(&self, slot: Slot) -> Option<u32> {
        if slot.is_none() || slot.id >= self.len {
            return None;
        }
        let e = self.at(slot.id);
        (e.gen == slot.gen && e.name.bytes().is_some()).then_some(slot.id)
    }

    /// Whether `slot` names a live entry.
    #[cfg(test)]
    pub fn contains(&self, slot: Slot) -> bool {
        self.live_id(slot).is_some()
    }

    /// Where the slot's key lives.
    pub fn place(&self, slot: Slot) -> Option<Place<'_>> {
        let e = self.at(self.live_id(slot)?);
        Some(Place {
            db: e.db,
            name: e.name.bytes()?,
        })
    }

    /// Whether `slot` is the entry of `name` in `db`.
    pub fn is_at(&self, slot: Slot, db: i32, name: &[u8]) -> bool {
        self.place(slot) == Some(Place { db, name })
    }

    /// Frees the entry (no-op for a stale handle); true if it was live.
    pub fn detach(&mut self, slot: Slot) -> bool {
        let Some(id) = self.live_id(slot) else {
            return false;
        };
        self.unschedule(id);
        self.at_mut(id).name = Name::Free;
        self.free.push(id);
        self.live -= 1;
        true
    }

    fn unschedule(&mut self, id: u32) {
        let (when, prev, next) = {
            let e = self.at(id);
            (e.when, e.prev, e.next)
        };
        if when == 0 {
            return;
        }
        if prev == NIL {
            match next {
                NIL => self.times.remove(&when),
                n => self.times.insert(when, n),
            };
        } else {
            self.at_mut(prev).next = next;
        }
        if next != NIL {
            self.at_mut(next).prev = prev;
        }
        let e = self.at_mut(id);
        e.when = 0;
        e.prev = NIL;
        e.next = NIL;
        self.scheduled -= 1;
    }

    /// Makes the timer look at the slot's key at `when` (`None`: not at all).
    pub fn schedule(&mut self, slot: Slot, when: Option<Ms>) {
        let Some(id) = self.live_id(slot) else {
            return;
        };
        let new = when.unwrap_or(0);
        if self.at(id).when == new {
            return;
        }
        self.unschedule(id);
        if new == 0 {
            return;
        }
        let head = self.times.insert(new, id).unwrap_or(NIL);
        if head != NIL {
            self.at_mut(head).prev = id;
        }
        let e = self.at_mut(id);
        e.when = new;
        e.prev = NIL;
        e.next = head;
        self.scheduled += 1;
    }

    /// The earliest scheduled time.
    pub fn first_due(&self) -> Option<Ms> {
        self.times.keys().next().copied()
    }

    /// Takes the earliest entry due at or before `now` off the schedule.
    pub fn pop_due(&mut self, now: Ms) -> Option<Slot> {
        let (&when, &id) = self.times.iter().next()?;
        if when > now {
            return None;
        }
        self.unschedule(id);
        Some(Slot {
            id,
            gen: self.at(id).gen,
        })
    }

    /// The key moved to `name` in `db` (RENAME, MOVE).
    pub fn relocate(&mut self, slot: Slot, db: i32, name: &[u8]) {
        if let Some(id) = self.live_id(slot) {
            let e = self.at_mut(id);
            e.db = db;
            e.name = Name::new(name);
        }
    }

    fn entries_mut(&mut self) -> impl Iterator<Item = &mut Entry> {
        let len = self.len as usize;
        self.chunks.iter_mut().flat_map(|c| c.iter_mut()).take(len)
    }

    /// `SWAPDB a b`: every key of one db is now in the other.
    pub fn swap_dbs(&mut self, a: i32, b: i32) {
        for e in self.entries_mut().filter(|e| e.name.bytes().is_some()) {
            if e.db == a {
                e.db = b;
            } else if e.db == b {
                e.db = a;
            }
        }
    }

    /// Every live slot in `db` (`None`: in every db).
    pub fn slots_in(&self, db: Option<i32>) -> Vec<Slot> {
        (0..self.len)
            .filter(|id| {
                let e = self.at(*id);
                e.name.bytes().is_some() && db.is_none_or(|d| d == e.db)
            })
            .map(|id| Slot {
                id,
                gen: self.at(id).gen,
            })
            .collect()
    }

    /// How many live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    /// How many entries are scheduled.
    pub fn scheduled(&self) -> usize {
        self.scheduled
    }

    /// Heap bytes held (for INFO): the chunks, long names, the free list and the times.
    pub fn heap_bytes(&self) -> usize {
        let names: usize = (0..self.len).map(|id| self.at(id).name.heap_len()).sum();
        self.chunks.len() * CHUNK * std::mem::size_of::<Entry>()
            + self.free.capacity() * 4
            + self.times.len() * 32
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

    #[test]
    fn many_keys_at_one_time_and_long_names() {
        let mut ix = Index::default();
        let long = vec![b'k'; 100];
        let slots: Vec<Slot> = (0..3000u32)
            .map(|i| {
                let name = if i % 7 == 0 {
                    long.clone()
                } else {
                    i.to_string().into_bytes()
                };
                let s = ix.attach(0, &name);
                ix.schedule(s, Some(100 + u64::from(i % 3)));
                s
            })
            .collect();
        assert_eq!(ix.scheduled(), 3000);
        assert_eq!(ix.place(slots[7]).map(|p| p.name.len()), Some(100));
        // Unlink from the middle, the head and the tail of one time's list.
        for s in slots.iter().step_by(5) {
            ix.schedule(*s, None);
        }
        for s in slots.iter().skip(1).step_by(5) {
            assert!(ix.detach(*s));
        }
        let mut seen = 0;
        let mut last = 0;
        while let Some(s) = ix.pop_due(1000) {
            let i = slots.iter().position(|x| *x == s).unwrap();
            assert!(i % 5 >= 2, "{i} was unscheduled or detached");
            let when = 100 + (i as u64 % 3);
            assert!(when >= last, "popped out of time order");
            last = when;
            seen += 1;
        }
        assert_eq!(seen, 3000 * 3 / 5);
        assert_eq!(ix.scheduled(), 0);
        assert_eq!(ix.first_due(), None);
        assert_eq!(ix.len(), 3000 - 600);
    }
}
