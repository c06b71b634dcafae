//! The system under test: one key of the real core, in a harness world.

use redis_lease_core::{
    Acquire, Changes, Election, Grants, Id, Keyed, Lock, LockError, Mode, Permits, Request, RwLock,
    Semaphore, Wait,
};

use super::ops::{Act, KindSel, Op, WaitGen};
use crate::harness::{World, START};

/// Large enough never to be reached by a generated run (the limit has its own tests in
/// rules.rs; the core counts waiters that left but were not skipped yet against it).
pub const MAX_WAITERS: usize = 10_000;

/// Owner ids of every form the core stores: inline (up to 22 bytes), a UUID in canonical text
/// (kept as 16 bytes), heap bytes (23 bytes, and the same UUID in capitals), sharing
/// prefixes, so that ordering and lookups mix the forms.
pub fn name(owner: usize) -> Vec<u8> {
    let uuid = format!("{owner:08x}-8d3b-4e5f-9a6b-7c8d9e0f1a2b");
    match owner % 5 {
        0 => uuid[..22].into(),
        1 => uuid.into(),
        2 => uuid[..23].into(),
        3 => uuid.to_uppercase().into(),
        _ => uuid[..7].into(),
    }
}

pub enum Key {
    Rw(RwLock),
    El(Election),
    Sem(Semaphore),
}

impl Key {
    pub fn new(kind: KindSel) -> Key {
        match kind {
            KindSel::Rw => Key::Rw(RwLock::default()),
            KindSel::El => Key::El(Election::default()),
            KindSel::Sem => Key::Sem(Semaphore::default()),
        }
    }

    pub fn kind(&self) -> KindSel {
        match self {
            Key::Rw(_) => KindSel::Rw,
            Key::El(_) => KindSel::El,
            Key::Sem(_) => KindSel::Sem,
        }
    }

    pub fn lock(&self) -> &Lock {
        match self {
            Key::Rw(l) => &l.0,
            Key::El(e) => &e.0,
            Key::Sem(s) => &s.0,
        }
    }

    pub fn lock_mut(&mut self) -> &mut Lock {
        match self {
            Key::Rw(l) => &mut l.0,
            Key::El(e) => &mut e.0,
            Key::Sem(s) => &mut s.0,
        }
    }
}

/// A reply, whatever the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Acquire(Result<Acquire, LockError>),
    Bool(bool),
    Token(Option<u64>),
    Nothing,
}

/// A waiter as both sides show it: id, owner, mode, permits, ttl, until, alive.
pub type WaiterRow = (u64, Vec<u8>, Mode, u32, u64, Option<u64>, bool);

pub struct Sut {
    pub key: Key,
    pub world: World,
    /// A semaphore's usual limit (what requests name unless the key has another).
    pub limit: u32,
}

impl Sut {
    pub fn new(kind: KindSel, limit: u32) -> Sut {
        Sut {
            key: Key::new(kind),
            world: World::at(START),
            limit,
        }
    }

    pub fn alive(&self, id: u64) -> bool {
        self.world.alive(id)
    }

    /// Every waiter, in the order they will be served (also those that left, until the core
    /// skips them).
    pub fn waiters(&self) -> Vec<WaiterRow> {
        self.key
            .lock()
            .waiters()
            .map(|w| {
                let alive = self.alive(w.id);
                (
                    w.id,
                    w.owner.to_vec(),
                    w.mode,
                    w.permits,
                    w.ttl,
                    w.until,
                    alive,
                )
            })
            .collect()
    }

    /// The ids of the waiters whose connection is still there.
    pub fn alive_ids(&self) -> Vec<u64> {
        self.waiters()
            .into_iter()
            .filter(|w| w.6)
            .map(|w| w.0)
            .collect()
    }

    fn pick_waiter(&self, i: &proptest::sample::Index) -> Option<u64> {
        let ws = self.alive_ids();
        (!ws.is_empty()).then(|| ws[i.index(ws.len())])
    }

    fn until(&self, g: &WaitGen) -> Option<u64> {
        let now = self.world.now;
        let lock = self.key.lock();
        match g {
            WaitGen::Forever => None,
            WaitGen::In(ms) => Some(now.saturating_add(*ms)),
            WaitGen::AtLease(i, delta) => {
                let mut ds: Vec<u64> = lock.live_holders(now).map(|h| h.hold.deadline).collect();
                ds.sort_unstable();
                let d = if ds.is_empty() {
                    now.saturating_add(10)
                } else {
                    ds[i.index(ds.len())]
                };
                Some(d.saturating_add_signed(i64::from(*delta)))
            }
            WaitGen::AtWait(i) => {
                let us: Vec<u64> = lock.waiters().filter_map(|w| w.until).collect();
                Some(if us.is_empty() {
                    now.saturating_add(20)
                } else {
                    us[i.index(us.len())]
                })
            }
        }
    }

    /// Gives an operation its concrete arguments (waiter ids, wait deadlines, limits).
    pub fn resolve(&mut self, op: &Op) -> Act {
        match op {
            Op::Lock {
                owner,
                write,
                permits,
                other_limit,
                ttl,
                wait,
            } => {
                let until = wait.as_ref().map(|g| self.until(g));
                let wait = until.map(|until| Wait {
                    id: self.world.next_id(),
                    until,
                });
                let kind = self.key.kind();
                let mode = match kind {
                    KindSel::Rw if !*write => Mode::Read,
                    KindSel::Rw | KindSel::El => Mode::Write,
                    KindSel::Sem => Mode::Read,
                };
                let (limit, permits) = if kind == KindSel::Sem {
                    let key_limit = self.key.lock().limit();
                    let usual = if key_limit != 0 {
                        key_limit
                    } else {
                        self.limit
                    };
                    let limit = other_limit.unwrap_or(usual);
                    (limit, (*permits).min(limit))
                } else {
                    (0, 1)
                };
                Act::Lock {
                    owner: *owner,
                    mode,
                    permits,
                    limit,
                    ttl: *ttl,
                    wait,
                }
            }
            Op::Unlock { owner } => Act::Unlock { owner: *owner },
            Op::Renew { owner, ttl } => Act::Renew {
                owner: *owner,
                ttl: *ttl,
            },
            Op::Cancel(i) => match self.pick_waiter(i) {
                Some(id) => Act::Cancel(id),
                None => Act::Cancel(u64::MAX - 1),
            },
            Op::CancelUnknown => {
                // The last id handed out (often granted or never queued), unless it left.
                let last = self.world.last_id();
                if last > 0 && self.alive(last) {
                    Act::Cancel(last)
                } else {
                    Act::Cancel(u64::MAX - 2)
                }
            }
            Op::Kill(i) => match self.pick_waiter(i) {
                Some(id) => Act::Kill(id),
                None => Act::Advance(0),
            },
            Op::Advance(ms) => Act::Advance(*ms),
            Op::Tick => Act::Tick,
            Op::Grants(held) => Act::Grants(if *held { Grants::Held } else { Grants::Open }),
            Op::Reattach => Act::Reattach,
        }
    }

    /// Runs one operation: its reply and changes, `None` for the ones the core does not see.
    pub fn act(&mut self, act: &Act) -> Option<(Reply, Changes)> {
        match act {
            Act::Kill(id) => {
                self.world.leave(*id);
                return None;
            }
            Act::Advance(ms) => {
                self.world.now = self.world.now.saturating_add(*ms);
                return None;
            }
            Act::Grants(g) => {
                self.world.grants = *g;
                return None;
            }
            _ => {}
        }
        if let Act::Reattach = act {
            let taken = self.key.lock_mut().take_waiters();
            for w in taken {
                if self.world.alive(w.id) {
                    self.key.lock_mut().requeue(w);
                }
            }
        }
        let mut env = self.world.env();
        let out = match (&mut self.key, act) {
            (
                Key::Rw(l),
                Act::Lock {
                    owner,
                    mode,
                    ttl,
                    wait,
                    ..
                },
            ) => {
                let o = Id::from(name(*owner));
                let req = Request {
                    owner: &o,
                    mode: *mode,
                    ttl: *ttl,
                    wait: *wait,
                    max_waiters: MAX_WAITERS,
                    max_hold: 0,
                };
                let (c, r) = l.lock(&req, &mut env);
                (Reply::Acquire(r), c)
            }
            (
                Key::El(e),
                Act::Lock {
                    owner, ttl, wait, ..
                },
            ) => {
                let (c, r) = e.campaign(name(*owner), *ttl, *wait, MAX_WAITERS, &mut env);
                (Reply::Acquire(r), c)
            }
            (
                Key::Sem(s),
                Act::Lock {
                    owner,
                    permits,
                    limit,
                    ttl,
                    wait,
                    ..
                },
            ) => {
                let o = Id::from(name(*owner));
                let req = Permits {
                    owner: &o,
                    limit: *limit,
                    permits: *permits,
                    ttl: *ttl,
                    wait: *wait,
                    max_waiters: MAX_WAITERS,
                    max_hold: 0,
                };
                let (c, r) = s.acquire(&req, &mut env);
                (Reply::Acquire(r), c)
            }
            (key, Act::Unlock { owner }) => {
                let o = name(*owner);
                let (c, r) = match key {
                    Key::Rw(l) => l.unlock(&o, &mut env),
                    Key::El(e) => e.resign(&o, &mut env),
                    Key::Sem(s) => s.release(&o, &mut env),
                };
                (Reply::Bool(r), c)
            }
            (key, Act::Renew { owner, ttl }) => {
                let o = name(*owner);
                let (c, r) = match key {
                    Key::Rw(l) => l.renew(&o, *ttl, &mut env),
                    Key::El(e) => e.renew(&o, *ttl, &mut env),
                    Key::Sem(s) => s.renew(&o, *ttl, &mut env),
                };
                (Reply::Token(r), c)
            }
            (key, Act::Cancel(id)) => {
                let (c, r) = match key {
                    Key::Rw(l) => Keyed::cancel(l, *id, &mut env),
                    Key::El(e) => Keyed::cancel(e, *id, &mut env),
                    Key::Sem(s) => Keyed::cancel(s, *id, &mut env),
                };
                (Reply::Bool(r), c)
            }
            (key, Act::Tick | Act::Reattach) => {
                let c = match key {
                    Key::Rw(l) => Keyed::tick(l, &mut env),
                    Key::El(e) => Keyed::tick(e, &mut env),
                    Key::Sem(s) => Keyed::tick(s, &mut env),
                };
                (Reply::Nothing, c)
            }
            (_, Act::Kill(_) | Act::Advance(_) | Act::Grants(_)) => unreachable!(),
        };
        Some(out)
    }

    /// Replaces an empty key by a fresh one (the key was deleted), keeping the token source.
    pub fn reset_if_empty(&mut self) -> bool {
        if self.key.lock().is_empty() {
            self.key = Key::new(self.key.kind());
            true
        } else {
            false
        }
    }
}
