use std::collections::{BTreeSet, HashMap};

use crate::id::Id;
use crate::{Mode, Ms};

/// One owner's holds on a key: how many of each mode, its lease deadline, its token, and the
/// cap past which it may not be renewed (its first grant + its max hold; 0: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hold {
    pub reads: u32,
    pub writes: u32,
    pub deadline: Ms,
    pub token: u64,
    pub cap: Ms,
}

impl Hold {
    /// No hold at all (the start of a new holder's record).
    pub const EMPTY: Hold = Hold {
        reads: 0,
        writes: 0,
        deadline: 0,
        token: 0,
        cap: 0,
    };

    /// Whether a lease ending at `deadline` passes this hold's cap.
    pub fn passes_cap(&self, deadline: Ms) -> bool {
        self.cap != 0 && deadline > self.cap
    }

    pub fn mode(&self) -> Mode {
        if self.writes > 0 {
            Mode::Write
        } else {
            Mode::Read
        }
    }

    pub fn live(&self, now: Ms) -> bool {
        now < self.deadline
    }
}

/// A hold with no cap: what the one-holder form keeps inline, 24 bytes where a [`Hold`] takes
/// 32, so a one-holder lock stays in jemalloc's 80-byte class. A capped hold (MAXHOLD, rare)
/// lives in the table, even alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Uncapped {
    reads: u32,
    writes: u32,
    deadline: Ms,
    token: u64,
}

impl Uncapped {
    #[inline]
    fn of(h: Hold) -> Option<Uncapped> {
        (h.cap == 0).then_some(Uncapped {
            reads: h.reads,
            writes: h.writes,
            deadline: h.deadline,
            token: h.token,
        })
    }

    #[inline]
    fn hold(self) -> Hold {
        Hold {
            reads: self.reads,
            writes: self.writes,
            deadline: self.deadline,
            token: self.token,
            cap: 0,
        }
    }
}

/// A holder as the outside sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HolderView<'a> {
    pub owner: &'a Id,
    pub hold: Hold,
}

/// The holders of a key. A single holder with no cap, the common case, is stored inline (its
/// id too, see [`Id`]), so a one-holder lock costs no allocation of its own; more holders, or
/// a capped one, live in a table indexed by owner and by deadline, so that no operation scans
/// them all.
#[derive(Debug, Default)]
pub(crate) enum Holders {
    #[default]
    Empty,
    One(Id, Uncapped),
    /// Two and more holders, or one with a cap.
    Many(Box<Table>),
}

#[derive(Debug, Default)]
pub(crate) struct Table {
    by_owner: HashMap<Id, Hold>,
    by_deadline: BTreeSet<(Ms, Id)>,
    /// The sum of every holder's `reads` (a semaphore's permits in use).
    reads: u64,
}

impl Holders {
    pub fn len(&self) -> usize {
        match self {
            Holders::Empty => 0,
            Holders::One(..) => 1,
            Holders::Many(t) => t.by_owner.len(),
        }
    }

    #[inline]
    pub fn get(&self, owner: &Id) -> Option<Hold> {
        match self {
            Holders::Empty => None,
            Holders::One(o, h) => (o == owner).then(|| h.hold()),
            Holders::Many(t) => t.by_owner.get(owner).copied(),
        }
    }

    /// The sum of every holder's `reads`: for a semaphore, the permits in use.
    pub fn total_reads(&self) -> u64 {
        match self {
            Holders::Empty => 0,
            Holders::One(_, h) => h.reads.into(),
            Holders::Many(t) => t.reads,
        }
    }

    /// True when some holder holds the write lock (it is then the only holder).
    pub fn has_writer(&self) -> bool {
        match self {
            Holders::Empty => false,
            Holders::One(_, h) => h.writes > 0,
            Holders::Many(t) => {
                t.by_owner.len() == 1 && t.by_owner.values().next().is_some_and(|h| h.writes > 0)
            }
        }
    }

    /// `owner` alone with `hold`: inline, or a table of one for a capped hold.
    fn alone(owner: Id, hold: Hold) -> Holders {
        match Uncapped::of(hold) {
            Some(u) => Holders::One(owner, u),
            None => {
                let mut t = Box::<Table>::default();
                t.insert(owner, hold);
                Holders::Many(t)
            }
        }
    }

    /// A table left with one holder and no cap goes back to the inline form; the table had
    /// at least two entries or a cap, so this is paid for by what grew it.
    fn shrink(&mut self) {
        let Holders::Many(t) = self else { return };
        let last = match t.by_owner.len() {
            0 => None,
            1 if t.by_owner.values().all(|h| h.cap == 0) => t.by_owner.drain().next(),
            _ => return,
        };
        *self = match last {
            Some((o, h)) => Holders::alone(o, h),
            None => Holders::Empty,
        };
    }

    /// Sets (or inserts) `owner`'s hold.
    pub fn put(&mut self, owner: &Id, hold: Hold) {
        match self {
            Holders::Empty => *self = Holders::alone(owner.clone(), hold),
            Holders::One(o, h) if o == owner => match Uncapped::of(hold) {
                Some(u) => *h = u,
                None => *self = Holders::alone(owner.clone(), hold),
            },
            Holders::One(..) => {
                let Holders::One(o, h) = std::mem::take(self) else {
                    unreachable!()
                };
                let mut t = Box::<Table>::default();
                t.insert(o, h.hold());
                t.insert(owner.clone(), hold);
                *self = Holders::Many(t);
            }
            Holders::Many(t) => match t.by_owner.get_mut(owner) {
                Some(h) => {
                    t.reads = t.reads - u64::from(h.reads) + u64::from(hold.reads);
                    if h.deadline != hold.deadline {
                        let key = (h.deadline, owner.clone());
                        t.by_deadline.remove(&key);
                        t.by_deadline.insert((hold.deadline, key.1));
                    }
                    *h = hold;
                    // A hold whose cap went (a re-grant without one) may go back inline.
                    if hold.cap == 0 && t.by_owner.len() == 1 {
                        self.shrink();
                    }
                }
                None => t.insert(owner.clone(), hold),
            },
        }
    }

    /// Removes `owner`'s hold, if any.
    pub fn remove(&mut self, owner: &Id) -> Option<Hold> {
        match self {
            Holders::One(o, h) if o == owner => {
                let h = h.hold();
                *self = Holders::default();
                Some(h)
            }
            Holders::Empty | Holders::One(..) => None,
            Holders::Many(t) => {
                let (key, hold) = t.by_owner.remove_entry(owner)?;
                t.by_deadline.remove(&(hold.deadline, key));
                t.reads -= u64::from(hold.reads);
                self.shrink();
                Some(hold)
            }
        }
    }

    /// The earliest deadline of any holder.
    pub fn min_deadline(&self) -> Option<Ms> {
        match self {
            Holders::Empty => None,
            Holders::One(_, h) => Some(h.deadline),
            Holders::Many(t) => t.by_deadline.first().map(|(d, _)| *d),
        }
    }

    /// The latest deadline of any holder.
    pub fn max_deadline(&self) -> Option<Ms> {
        match self {
            Holders::Empty => None,
            Holders::One(_, h) => Some(h.deadline),
            Holders::Many(t) => t.by_deadline.last().map(|(d, _)| *d),
        }
    }

    /// The owner whose deadline is earliest, if that deadline is at or before `now`.
    pub fn first_lapsed(&self, now: Ms) -> Option<Id> {
        match self {
            Holders::Empty => None,
            Holders::One(o, h) => (!h.hold().live(now)).then(|| o.clone()),
            Holders::Many(t) => t
                .by_deadline
                .first()
                .filter(|(d, _)| *d <= now)
                .map(|(_, o)| o.clone()),
        }
    }

    /// Every holder, in no particular order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = HolderView<'_>> + '_> {
        match self {
            Holders::Empty => Box::new(std::iter::empty()),
            Holders::One(owner, hold) => Box::new(std::iter::once(HolderView {
                owner,
                hold: hold.hold(),
            })),
            Holders::Many(t) => Box::new(
                t.by_owner
                    .iter()
                    .map(|(owner, hold)| HolderView { owner, hold: *hold }),
            ),
        }
    }

    /// Heap bytes beyond the inline part, each allocation rounded by `round` (an estimate
    /// for the table form: hash buckets, tree nodes, and each owner stored twice).
    pub fn heap_bytes(&self, round: &dyn Fn(usize) -> usize) -> usize {
        match self {
            Holders::Empty => 0,
            Holders::One(o, _) => round(o.heap_len()),
            Holders::Many(t) => {
                let owners: usize = t.by_owner.keys().map(|o| 2 * round(o.heap_len())).sum();
                let entry = std::mem::size_of::<(Id, Hold)>() + 1;
                let index = std::mem::size_of::<(Ms, Id)>() + 8;
                round(std::mem::size_of::<Table>())
                    + t.by_owner.capacity() * entry
                    + t.by_deadline.len() * index
                    + owners
            }
        }
    }
}

impl Table {
    fn insert(&mut self, owner: Id, hold: Hold) {
        self.reads += u64::from(hold.reads);
        self.by_deadline.insert((hold.deadline, owner.clone()));
        self.by_owner.insert(owner, hold);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(s: &str) -> Id {
        Id::from(s)
    }

    fn hold(deadline: Ms) -> Hold {
        Hold {
            reads: 1,
            writes: 0,
            deadline,
            token: 1,
            cap: 0,
        }
    }

    #[test]
    fn one_holder_is_compact() {
        // The owner (a UUID, or up to 22 bytes) and its hold, inline: no allocation of their own.
        assert_eq!(std::mem::size_of::<Holders>(), 48);
        let mut h = Holders::default();
        h.put(&id("0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b"), hold(10));
        assert_eq!(h.heap_bytes(&|n| n), 0);
    }

    #[test]
    fn grows_and_shrinks_between_forms() {
        let mut h = Holders::default();
        assert_eq!(h.len(), 0);
        h.put(&id("a"), hold(10));
        assert!(matches!(h, Holders::One(..)));
        h.put(&id("b"), hold(5));
        h.put(&id("c"), hold(20));
        assert_eq!(h.len(), 3);
        assert_eq!(h.min_deadline(), Some(5));
        assert_eq!(h.max_deadline(), Some(20));
        assert_eq!(h.first_lapsed(4), None);
        assert_eq!(h.first_lapsed(5), Some(id("b")));
        assert_eq!(h.total_reads(), 3);
        h.put(&id("b"), hold(30));
        assert_eq!(h.min_deadline(), Some(10));
        assert_eq!(h.max_deadline(), Some(30));
        assert!(h.remove(&id("a")).is_some());
        assert!(h.remove(&id("zz")).is_none());
        assert!(h.remove(&id("b")).is_some());
        assert!(matches!(h, Holders::One(..)));
        assert_eq!(h.iter().next().unwrap().owner, b"c");
        assert!(h.remove(&id("c")).is_some());
        assert_eq!(h.len(), 0);
        assert_eq!(h.min_deadline(), None);
    }

    #[test]
    fn a_capped_hold_lives_in_the_table_even_alone() {
        let capped = Hold {
            cap: 50,
            ..hold(10)
        };
        let mut h = Holders::default();
        h.put(&id("a"), capped);
        assert!(matches!(h, Holders::Many(..)));
        assert_eq!(h.get(&id("a")), Some(capped));
        assert_eq!(h.len(), 1);
        assert_eq!(h.min_deadline(), Some(10));
        assert_eq!(h.first_lapsed(10), Some(id("a")));
        // A writer with a cap is still the one writer.
        h.put(
            &id("a"),
            Hold {
                reads: 0,
                writes: 1,
                ..capped
            },
        );
        assert!(h.has_writer());
        h.put(&id("a"), capped);
        assert!(!h.has_writer());
        // Another holder joins and leaves: the capped one stays in the table, cap intact.
        h.put(&id("b"), hold(20));
        assert!(h.remove(&id("b")).is_some());
        assert!(matches!(h, Holders::Many(..)));
        assert_eq!(h.get(&id("a")), Some(capped));
        // An uncapped one alone goes back inline; a cap comes back in the table.
        h.put(&id("b"), hold(20));
        assert_eq!(h.remove(&id("a")), Some(capped));
        assert!(matches!(h, Holders::One(..)));
        h.put(
            &id("b"),
            Hold {
                cap: 90,
                ..hold(20)
            },
        );
        assert!(matches!(h, Holders::Many(..)));
        assert_eq!(h.get(&id("b")).map(|h| h.cap), Some(90));
        assert!(h.remove(&id("b")).is_some());
        assert!(matches!(h, Holders::Empty));
        assert_eq!(h.len(), 0);
    }
}

/// The holders against a plain map, over random puts and removes with and without caps: every
/// query agrees, and the form is the canonical one (inline only for one uncapped hold).
#[cfg(test)]
mod model {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Debug, Clone)]
    enum Op {
        Put(u8, u32, u32, u64, u64),
        Remove(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (
                0u8..4,
                0u32..3,
                0u32..2,
                0u64..6,
                prop_oneof![Just(0u64), 1u64..4]
            )
                .prop_map(|(o, r, w, d, c)| Op::Put(o, r, w, d, c)),
            (0u8..4).prop_map(Op::Remove),
        ]
    }

    fn owner(i: u8) -> Id {
        Id::from(format!("o{i}").as_str())
    }

    fn check(h: &Holders, m: &HashMap<u8, Hold>) {
        assert_eq!(h.len(), m.len());
        for i in 0..4u8 {
            assert_eq!(h.get(&owner(i)), m.get(&i).copied(), "get {i}");
        }
        let reads: u64 = m.values().map(|x| u64::from(x.reads)).sum();
        assert_eq!(h.total_reads(), reads);
        assert_eq!(h.min_deadline(), m.values().map(|x| x.deadline).min());
        assert_eq!(h.max_deadline(), m.values().map(|x| x.deadline).max());
        assert_eq!(
            h.has_writer(),
            m.len() == 1 && m.values().all(|x| x.writes > 0)
        );
        for now in 0..7 {
            let lapsed = h.first_lapsed(now);
            assert_eq!(lapsed.is_some(), m.values().any(|x| x.deadline <= now));
            if let Some(o) = lapsed {
                let i = (0..4u8).find(|i| owner(*i) == o).unwrap();
                assert_eq!(Some(m[&i].deadline), h.min_deadline());
            }
        }
        let mut seen: Vec<(Id, Hold)> = h.iter().map(|v| (v.owner.clone(), v.hold)).collect();
        seen.sort_by_key(|x| x.0.clone());
        let mut want: Vec<(Id, Hold)> = m.iter().map(|(i, x)| (owner(*i), *x)).collect();
        want.sort_by_key(|x| x.0.clone());
        assert_eq!(seen, want);
        match h {
            Holders::Empty => assert!(m.is_empty()),
            Holders::One(..) => assert!(m.len() == 1 && m.values().all(|x| x.cap == 0)),
            Holders::Many(t) => {
                assert!(
                    m.len() >= 2 || (m.len() == 1 && m.values().all(|x| x.cap != 0)),
                    "a table that should be inline: {m:?}"
                );
                assert_eq!(t.by_deadline.len(), t.by_owner.len());
                for (o, x) in &t.by_owner {
                    assert!(t.by_deadline.contains(&(x.deadline, o.clone())));
                }
                assert_eq!(t.reads, reads);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]
        #[test]
        fn holders_match_a_map(ops in proptest::collection::vec(op(), 0..40)) {
            let mut h = Holders::default();
            let mut m: HashMap<u8, Hold> = HashMap::new();
            for o in ops {
                match o {
                    Op::Put(i, reads, writes, deadline, cap) => {
                        let hold = Hold { reads, writes, deadline, token: deadline + 1, cap };
                        h.put(&owner(i), hold);
                        m.insert(i, hold);
                    }
                    Op::Remove(i) => prop_assert_eq!(h.remove(&owner(i)), m.remove(&i)),
                }
                check(&h, &m);
            }
        }
    }
}
