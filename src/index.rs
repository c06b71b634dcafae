//! The module's own index of its keys: one entry per key of its types (and per name whose
//! waiters are parked while grants are held), holding the key's db and name and the next time
//! the timer must look at it. A value knows its entry by a [`Slot`]; the index follows the key
//! through RENAME, MOVE and SWAPDB and drops entries when keys go, by any route. Pure data: the
//! schedule service arms Redis's timer from it.
//!
//! Memory is per key: 40-byte entries in fixed-size chunks (no doubling waste), names up to
//! 22 bytes inline, and the schedule links entries into one list per millisecond (no tree
//! node per key; a tree holds only the distinct times, which are few). An entry does not
//! store its time: the head of a list points at its time's bucket instead.

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

/// No neighbour in a list; as `prev`, also: not scheduled.
const NIL: u32 = u32::MAX;
/// Marks a `prev` that names the bucket of the list's time (the entry is the list's head).
const HEAD: u32 = 1 << 31;

#[derive(Debug)]
struct Entry {
    gen: u32,
    db: i32,
    /// The previous entry in its time's list, `HEAD | bucket` for the head, NIL when not
    /// scheduled.
    prev: u32,
    next: u32,
    name: Name,
}

/// One scheduled time and the head of its list.
#[derive(Debug)]
struct Bucket {
    when: Ms,
    head: u32,
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
    /// Each scheduled time's bucket.
    times: BTreeMap<Ms, u32>,
    buckets: Vec<Bucket>,
    free_buckets: Vec<u32>,
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
                // Ids stay below HEAD (2^31 entries would be 80 GiB).
                assert!(id < HEAD - 1, "the key index is full");
                if id as usize == self.chunks.len() * CHUNK {
                    let chunk = (0..CHUNK).map(|_| Entry {
                        gen: 0,
                        db: 0,
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
        let (prev, next) = {
            let e = self.at(id);
            (e.prev, e.next)
        };
        if prev == NIL {
            return;
        }
        if prev & HEAD != 0 {
            let b = prev & !HEAD;
            if next == NIL {
                let when = self.buckets[b as usize].when;
                self.times.remove(&when);
                self.free_buckets.push(b);
            } else {
                self.buckets[b as usize].head = next;
                self.at_mut(next).prev = prev;
            }
        } else {
            self.at_mut(prev).next = next;
            if next != NIL {
                self.at_mut(next).prev = prev;
            }
        }
        let e = self.at_mut(id);
        e.prev = NIL;
        e.next = NIL;
        self.scheduled -= 1;
    }

    /// Makes the timer look at the slot's key at `when` (`None`: not at all).
    pub fn schedule(&mut self, slot: Slot, when: Option<Ms>) {
        let Some(id) = self.live_id(slot) else {
            return;
        };
        let prev = self.at(id).prev;
        if prev != NIL
            && prev & HEAD != 0
            && Some(self.buckets[(prev & !HEAD) as usize].when) == when
        {
            return;
        }
        self.unschedule(id);
        let Some(when) = when.filter(|w| *w != 0) else {
            return;
        };
        let (b, head) = match self.times.get(&when) {
            Some(&b) => {
                let bucket = &mut self.buckets[b as usize];
                (b, std::mem::replace(&mut bucket.head, id))
            }
            None => {
                let bucket = Bucket { when, head: id };
                let b = match self.free_buckets.pop() {
                    Some(b) => {
                        self.buckets[b as usize] = bucket;
                        b
                    }
                    None => {
                        self.buckets.push(bucket);
                        self.buckets.len() as u32 - 1
                    }
                };
                self.times.insert(when, b);
                (b, NIL)
            }
        };
        if head != NIL {
            self.at_mut(head).prev = id;
        }
        let e = self.at_mut(id);
        e.prev = HEAD | b;
        e.next = head;
        self.scheduled += 1;
    }

    /// The earliest scheduled time.
    pub fn first_due(&self) -> Option<Ms> {
        self.times.keys().next().copied()
    }

    /// Takes the earliest entry due at or before `now` off the schedule.
    pub fn pop_due(&mut self, now: Ms) -> Option<Slot> {
        let (&when, &b) = self.times.iter().next()?;
        if when > now {
            return None;
        }
        let id = self.buckets[b as usize].head;
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
            + self.buckets.capacity() * std::mem::size_of::<Bucket>()
            + self.free_buckets.capacity() * 4
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
        assert_eq!(std::mem::size_of::<Entry>(), 40);
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
        // Bounded: a broken list could hand out the same entry forever.
        for _ in 0..=3000 {
            let Some(s) = ix.pop_due(1000) else { break };
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

    #[test]
    fn the_schedule_agrees_with_a_plain_map_under_random_operations() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut ix = Index::default();
        let mut model: std::collections::BTreeMap<Slot, Ms> = Default::default();
        let mut live: Vec<Slot> = Vec::new();
        for step in 0..20_000 {
            match rng.random_range(0..10) {
                0 | 1 => {
                    live.push(ix.attach(rng.random_range(0..3), &step.to_string().into_bytes()))
                }
                2 if !live.is_empty() => {
                    let s = live.swap_remove(rng.random_range(0..live.len()));
                    assert!(ix.detach(s));
                    model.remove(&s);
                }
                3 => {
                    let now = rng.random_range(0..40);
                    // Bounded: a broken list could hand out the same entry forever.
                    for _ in 0..=model.len() {
                        let Some(s) = ix.pop_due(now) else { break };
                        let when = model.remove(&s).expect("popped an unscheduled entry");
                        assert!(when <= now);
                        assert!(
                            model.values().all(|w| *w >= when),
                            "popped out of time order"
                        );
                    }
                    assert!(model.values().all(|w| *w > now), "a due entry was left");
                }
                _ if !live.is_empty() => {
                    let s = live[rng.random_range(0..live.len())];
                    // Few distinct times, so lists are long and heads move often.
                    let when = rng.random_range(0..40u64);
                    ix.schedule(s, Some(when));
                    if when == 0 {
                        model.remove(&s);
                    } else {
                        model.insert(s, when);
                    }
                }
                _ => {}
            }
            assert_eq!(ix.scheduled(), model.len());
            assert_eq!(ix.first_due(), model.values().min().copied());
        }
    }
}
