//! A bounded, seeded fuzz of the core's public API: arbitrary operations with extreme values
//! (ttl = u64::MAX, a clock near u64::MAX or going backwards, empty and huge owners, duplicate
//! and extreme waiter ids, wait deadlines in the past, now, far ahead and at u64::MAX,
//! max-waiters 0, semaphore limits and permits of 0, above the limit and u32::MAX, effects and
//! RDB holds that break the rules, a flaky `alive` oracle, grants switched between open and
//! held, waiters taken out of one key and put back into another, a key driven as a lock, an
//! election and a semaphore in turn) must never panic: inside Redis a panic kills the server.
//! Every operation runs under `catch_unwind`; a panic fails the test with the seed, the
//! operation's number and the operation itself.

mod harness;

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Once};
use std::time::Duration;

use harness::{Oracle, World, START};
use redis_lease_core::{
    Acquire, Changes, DropReason, Effect, Election, Env, Grants, Hold, Id, Lock, LockError, Mode,
    Permits, Request, RwLock, Semaphore, Tokens, Wait,
};

/// Operations per run (two runs with different seeds in the default suite).
const OPS: u64 = 400_000;
const SLOTS: usize = 4;

struct Rng(u64);

impl Rng {
    /// splitmix64
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn ttl(&mut self) -> u64 {
        match self.below(10) {
            0 => 0,
            1 => u64::MAX,
            2 => u64::MAX - self.below(3),
            3 => self.next(),
            4 => 1,
            5 => 86_400_000,
            _ => 1 + self.below(200),
        }
    }

    fn id(&mut self, counter: u64) -> u64 {
        match self.below(8) {
            0 => 0,
            1 => u64::MAX,
            2 => self.next(),
            3 => counter.saturating_sub(self.below(4)),
            _ => counter,
        }
    }

    fn token(&mut self) -> u64 {
        match self.below(40) {
            0 => u64::MAX,
            1 => u64::MAX - 1 - self.below(10),
            2 => 0,
            3..=5 => self.next(),
            _ => self.below(1_000_000),
        }
    }

    /// A wait deadline around `now`, or at the extremes.
    fn until(&mut self, now: u64) -> Option<u64> {
        match self.below(12) {
            0..=2 => None,
            3 => Some(0),
            4 => Some(u64::MAX),
            5 => Some(now),
            6 => Some(now.saturating_sub(self.below(100))),
            7 => Some(self.next()),
            _ => Some(now.saturating_add(self.below(200))),
        }
    }

    fn limit(&mut self) -> u32 {
        match self.below(10) {
            0 => 0,
            1 => u32::MAX,
            2 => u32::MAX - 1,
            _ => 1 + self.below(4) as u32,
        }
    }

    fn permits(&mut self, limit: u32) -> u32 {
        match self.below(10) {
            0 => 0,
            1 => u32::MAX,
            2 => limit,
            3 => limit.saturating_add(1),
            _ => 1 + self.below(3) as u32,
        }
    }

    /// Which kind of key an operation treats a slot as.
    fn kind(&mut self) -> Kind {
        match self.below(3) {
            0 => Kind::Rw,
            1 => Kind::El,
            _ => Kind::Sem,
        }
    }

    fn max_waiters(&mut self) -> usize {
        [0, 1, 2, 5, 1000, usize::MAX][self.below(6) as usize]
    }

    fn mode(&mut self) -> Mode {
        if self.chance(50) {
            Mode::Read
        } else {
            Mode::Write
        }
    }
}

fn owners() -> Vec<Vec<u8>> {
    vec![
        vec![],
        b"a".to_vec(),
        b"b".to_vec(),
        b"c".to_vec(),
        vec![0],
        (0..=255u8).collect(),
        vec![0xff; 257],
        vec![b'x'; 64 * 1024],
        // A UUID (kept as 16 bytes), the same in capitals and its first 22 bytes (both bytes).
        b"0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b".to_vec(),
        b"0F4A2C1E-8D3B-4E5F-9A6B-7C8D9E0F1A2B".to_vec(),
        b"0f4a2c1e-8d3b-4e5f-9a6".to_vec(),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Rw,
    El,
    Sem,
}

/// One operation, with its arguments (owners by index into `owners()`, to keep reports short).
#[derive(Clone, Debug)]
enum Op {
    SetClock(u64),
    Advance(u64),
    /// The wall clock alone steps (NTP, an operator): wait deadlines, on the monotonic clock,
    /// stay where they were.
    StepWall(i64),
    Lock {
        slot: usize,
        owner: usize,
        mode: Mode,
        ttl: u64,
        wait: Option<Wait>,
        max_waiters: usize,
    },
    Unlock {
        slot: usize,
        owner: usize,
    },
    Renew {
        slot: usize,
        owner: usize,
        ttl: u64,
        kind: Kind,
    },
    Tick {
        slot: usize,
        kind: Kind,
    },
    Cancel {
        slot: usize,
        id: u64,
        kind: Kind,
    },
    Campaign {
        slot: usize,
        owner: usize,
        ttl: u64,
        wait: Option<Wait>,
        max_waiters: usize,
    },
    Resign {
        slot: usize,
        owner: usize,
    },
    Acquire {
        slot: usize,
        owner: usize,
        limit: u32,
        permits: u32,
        ttl: u64,
        wait: Option<Wait>,
        max_waiters: usize,
    },
    Release {
        slot: usize,
        owner: usize,
    },
    /// Grants are held (quarantine) or open from now on.
    Grants(bool),
    /// The shell takes a key's waiters out and puts them back into a key (maybe another one,
    /// of another kind), then ticks it.
    Reattach {
        from: usize,
        to: usize,
        kind: Kind,
    },
    /// `Lock::restore_limit` of an arbitrary limit (RDB, RESTORE).
    RestoreLimit {
        slot: usize,
        limit: u32,
    },
    /// Read every query of a key.
    Inspect {
        slot: usize,
        owner: usize,
    },
    /// `Lock::apply` of an arbitrary effect (replication, AOF).
    Apply {
        slot: usize,
        effect: FuzzEffect,
    },
    /// `Lock::restore` of an arbitrary hold (RDB, RESTORE).
    Restore {
        slot: usize,
        owner: usize,
        hold: Hold,
    },
    ObserveToken {
        slot: usize,
        token: u64,
    },
    TokensObserve(u64),
    TokensIssue {
        key_last: u64,
    },
    /// The key is deleted (a fresh `Lock`, same token source).
    Delete {
        slot: usize,
    },
    /// A waiter's connection goes away.
    Kill(u64),
    /// The `alive` oracle changes character.
    Oracle(u8),
}

#[derive(Clone, Debug)]
enum FuzzEffect {
    Grant {
        owner: usize,
        mode: Mode,
        deadline: u64,
        token: u64,
    },
    Take {
        owner: usize,
        permits: u32,
        deadline: u64,
        token: u64,
    },
    Limit(u32),
    Release {
        owner: usize,
    },
    Drop {
        owner: usize,
        lapse: bool,
    },
    Renew {
        owner: usize,
        deadline: u64,
    },
}

impl FuzzEffect {
    fn build(&self, owners: &[Id]) -> Effect {
        let o = |i: &usize| owners[*i].clone();
        match self {
            FuzzEffect::Grant {
                owner,
                mode,
                deadline,
                token,
            } => Effect::Grant {
                owner: o(owner),
                mode: *mode,
                deadline: *deadline,
                token: *token,
            },
            FuzzEffect::Take {
                owner,
                permits,
                deadline,
                token,
            } => Effect::Take {
                owner: o(owner),
                permits: *permits,
                deadline: *deadline,
                token: *token,
            },
            FuzzEffect::Limit(limit) => Effect::Limit { limit: *limit },
            FuzzEffect::Release { owner } => Effect::Release { owner: o(owner) },
            FuzzEffect::Drop { owner, lapse } => Effect::Drop {
                owner: o(owner),
                reason: if *lapse {
                    DropReason::Lapse
                } else {
                    DropReason::Resign
                },
            },
            FuzzEffect::Renew { owner, deadline } => Effect::Renew {
                owner: o(owner),
                deadline: *deadline,
            },
        }
    }
}

struct State {
    owners: Vec<Id>,
    slots: Vec<Lock>,
    world: World,
    /// Replica of slot 0, fed with every effect of slot 0.
    replica: Lock,
    replica_tokens: Tokens,
    stats: Stats,
}

/// What the run reached, to show it is not shallow.
#[derive(Clone, Copy, Debug, Default)]
struct Stats {
    granted: u64,
    queued: u64,
    busy: u64,
    refused: u64,
    woken: u64,
    timed_out: u64,
    effects: u64,
    sem_granted: u64,
    held_ops: u64,
    requeued: u64,
}

impl State {
    fn new() -> State {
        State {
            owners: owners().into_iter().map(Id::from).collect(),
            slots: (0..SLOTS).map(|_| Lock::default()).collect(),
            world: World::at(START),
            replica: Lock::default(),
            replica_tokens: Tokens::new(),
            stats: Stats::default(),
        }
    }

    fn gen(&mut self, rng: &mut Rng) -> Op {
        let slot = rng.below(SLOTS as u64) as usize;
        let owner = {
            // Mostly small owners, so that keys have several holders and waiters.
            let n = self.owners.len() as u64;
            if rng.chance(85) {
                1 + rng.below(3) as usize
            } else {
                rng.below(n) as usize
            }
        };
        let id = rng.id(self.world.next_id());
        let until = rng.until(self.world.mono());
        let wait = rng.chance(60).then_some(Wait { id, until });
        match rng.below(112) {
            0..=2 => Op::SetClock(match rng.below(24) {
                0 => u64::MAX,
                1 => u64::MAX - rng.below(1000),
                2 => u64::MAX / 1000 + rng.below(3),
                3 => 0,
                4 => rng.next(),
                5..=8 => self.world.now.saturating_sub(rng.below(1000)),
                _ => 1_700_000_000_000 + rng.below(1_000_000),
            }),
            13 if rng.chance(50) => Op::StepWall(rng.below(20_000) as i64 - 10_000),
            // Huge clocks do not last: most runs stay in a realistic range.
            3..=12 if self.world.now >= u64::MAX / 1000 && rng.chance(50) => {
                Op::SetClock(1_700_000_000_000 + rng.below(1_000_000))
            }
            3..=12 => Op::Advance(match rng.below(200) {
                0 => u64::MAX / 2,
                1..=4 => rng.below(1 << 40),
                _ => rng.below(100),
            }),
            13..=32 => Op::Lock {
                slot,
                owner,
                mode: rng.mode(),
                ttl: rng.ttl(),
                wait,
                max_waiters: rng.max_waiters(),
            },
            33..=42 => Op::Unlock { slot, owner },
            43..=47 => Op::Renew {
                slot,
                owner,
                ttl: rng.ttl(),
                kind: rng.kind(),
            },
            48..=52 => Op::Tick {
                slot,
                kind: rng.kind(),
            },
            53..=57 => Op::Cancel {
                slot,
                id,
                kind: rng.kind(),
            },
            58..=67 => Op::Campaign {
                slot,
                owner,
                ttl: rng.ttl(),
                wait,
                max_waiters: rng.max_waiters(),
            },
            68..=72 => Op::Resign { slot, owner },
            73..=79 => Op::Inspect { slot, owner },
            80..=84 => {
                let effect = match rng.below(6) {
                    0 => FuzzEffect::Grant {
                        owner,
                        mode: rng.mode(),
                        deadline: rng.ttl().wrapping_add(self.world.now),
                        token: rng.token(),
                    },
                    1 => FuzzEffect::Release { owner },
                    2 => FuzzEffect::Drop {
                        owner,
                        lapse: rng.chance(50),
                    },
                    3 => {
                        let limit = rng.limit();
                        FuzzEffect::Take {
                            owner,
                            permits: rng.permits(limit),
                            deadline: rng.ttl().wrapping_add(self.world.now),
                            token: rng.token(),
                        }
                    }
                    4 => FuzzEffect::Limit(rng.limit()),
                    _ => FuzzEffect::Renew {
                        owner,
                        deadline: rng.ttl().wrapping_add(self.world.now),
                    },
                };
                Op::Apply { slot, effect }
            }
            85..=86 => Op::Restore {
                slot,
                owner,
                hold: Hold {
                    reads: [0, 1, 2, u32::MAX][rng.below(4) as usize],
                    writes: [0, 1, u32::MAX][rng.below(3) as usize],
                    deadline: rng.ttl().wrapping_add(self.world.now),
                    cap: 0,
                    token: rng.token(),
                },
            },
            87 => Op::ObserveToken {
                slot,
                token: rng.token(),
            },
            88 => Op::TokensObserve(rng.token()),
            89 => Op::TokensIssue {
                key_last: rng.token(),
            },
            90..=92 => Op::Delete { slot },
            93..=97 => Op::Kill(rng.id(self.world.last_id())),
            98..=99 => Op::Oracle(rng.below(4) as u8),
            100..=106 => {
                let limit = rng.limit();
                Op::Acquire {
                    slot,
                    owner,
                    limit,
                    permits: rng.permits(limit),
                    ttl: rng.ttl(),
                    wait,
                    max_waiters: rng.max_waiters(),
                }
            }
            107..=108 => Op::Release { slot, owner },
            109 => Op::Grants(rng.chance(40)),
            110 => Op::Reattach {
                from: slot,
                to: if rng.chance(70) {
                    slot
                } else {
                    rng.below(SLOTS as u64) as usize
                },
                kind: rng.kind(),
            },
            _ => Op::RestoreLimit {
                slot,
                limit: rng.limit(),
            },
        }
    }

    fn exec(&mut self, op: &Op) {
        let State {
            owners,
            slots,
            world,
            replica,
            replica_tokens,
            stats,
            ..
        } = self;
        let now = world.now;
        let o = |i: &usize| &owners[*i];
        let mut out: Option<(usize, Changes)> = None;
        match op {
            Op::SetClock(t) => world.now = *t,
            Op::StepWall(ms) => {
                world.now = now.saturating_add_signed(*ms);
                world.wall_ahead = world.wall_ahead.saturating_add(*ms);
            }
            Op::Advance(ms) => world.now = now.saturating_add(*ms),
            Op::Lock {
                slot,
                owner,
                mode,
                ttl,
                wait,
                max_waiters,
            } => {
                let mut l = RwLock(std::mem::take(&mut slots[*slot]));
                let req = Request {
                    owner: o(owner),
                    mode: *mode,
                    ttl: *ttl,
                    wait: *wait,
                    max_waiters: *max_waiters,
                    max_hold: 0,
                };
                let (c, r) = l.lock(&req, &mut world.env());
                count(stats, r);
                slots[*slot] = l.0;
                out = Some((*slot, c));
            }
            Op::Unlock { slot, owner } => {
                let mut l = RwLock(std::mem::take(&mut slots[*slot]));
                let (c, _) = l.unlock(o(owner), &mut world.env());
                slots[*slot] = l.0;
                out = Some((*slot, c));
            }
            Op::Renew {
                slot,
                owner,
                ttl,
                kind,
            } => {
                let lock = std::mem::take(&mut slots[*slot]);
                let mut env = world.env();
                let (lock, c) = match kind {
                    Kind::El => {
                        let mut e = Election(lock);
                        let (c, _) = e.renew(o(owner), *ttl, &mut env);
                        (e.0, c)
                    }
                    Kind::Rw => {
                        let mut l = RwLock(lock);
                        let (c, _) = l.renew(o(owner), *ttl, &mut env);
                        (l.0, c)
                    }
                    Kind::Sem => {
                        let mut s = Semaphore(lock);
                        let (c, _) = s.renew(o(owner), *ttl, &mut env);
                        (s.0, c)
                    }
                };
                slots[*slot] = lock;
                out = Some((*slot, c));
            }
            Op::Tick { slot, kind } => {
                let lock = std::mem::take(&mut slots[*slot]);
                let (lock, c) = keyed(*kind, lock, |k, env| (k.tick(env), ()), &mut world.env());
                slots[*slot] = lock;
                out = Some((*slot, c.0));
            }
            Op::Cancel { slot, id, kind } => {
                let lock = std::mem::take(&mut slots[*slot]);
                let (lock, c) = keyed(*kind, lock, |k, env| k.cancel(*id, env), &mut world.env());
                slots[*slot] = lock;
                out = Some((*slot, c.0));
            }
            Op::Campaign {
                slot,
                owner,
                ttl,
                wait,
                max_waiters,
            } => {
                let mut e = Election(std::mem::take(&mut slots[*slot]));
                let (c, r) = e.campaign(o(owner), *ttl, *wait, *max_waiters, &mut world.env());
                count(stats, r);
                if let Ok(Acquire::Granted(_)) = r {
                    let _ = e.current(now);
                }
                slots[*slot] = e.0;
                out = Some((*slot, c));
            }
            Op::Resign { slot, owner } => {
                let mut e = Election(std::mem::take(&mut slots[*slot]));
                let (c, _) = e.resign(o(owner), &mut world.env());
                slots[*slot] = e.0;
                out = Some((*slot, c));
            }
            Op::Acquire {
                slot,
                owner,
                limit,
                permits,
                ttl,
                wait,
                max_waiters,
            } => {
                let mut s = Semaphore(std::mem::take(&mut slots[*slot]));
                let req = Permits {
                    owner: o(owner),
                    limit: *limit,
                    permits: *permits,
                    ttl: *ttl,
                    wait: *wait,
                    max_waiters: *max_waiters,
                    max_hold: 0,
                };
                let (c, r) = s.acquire(&req, &mut world.env());
                count(stats, r);
                if let Ok(Acquire::Granted(_)) = r {
                    stats.sem_granted += 1;
                }
                let _ = (s.0.limit(), s.0.permits_used());
                slots[*slot] = s.0;
                out = Some((*slot, c));
            }
            Op::Release { slot, owner } => {
                let mut s = Semaphore(std::mem::take(&mut slots[*slot]));
                let (c, _) = s.release(o(owner), &mut world.env());
                slots[*slot] = s.0;
                out = Some((*slot, c));
            }
            Op::Grants(held) => {
                world.grants = if *held { Grants::Held } else { Grants::Open };
            }
            Op::Reattach { from, to, kind } => {
                let taken = slots[*from].take_waiters();
                stats.requeued += taken.len() as u64;
                for w in taken {
                    if world.alive(w.id) {
                        slots[*to].requeue(w);
                    }
                }
                let lock = std::mem::take(&mut slots[*to]);
                let (lock, c) = keyed(*kind, lock, |k, env| (k.tick(env), ()), &mut world.env());
                slots[*to] = lock;
                out = Some((*to, c.0));
            }
            Op::RestoreLimit { slot, limit } => slots[*slot].restore_limit(*limit),
            Op::Inspect { slot, owner } => {
                let l = &slots[*slot];
                let mut n = 0usize;
                n += l.live_holders(now).count();
                n += l
                    .holders()
                    .map(|h| h.hold.mode().as_str().len())
                    .sum::<usize>();
                n += l.waiters().map(|w| w.owner.len()).sum::<usize>();
                n += l.holder_count() + l.waiter_count();
                n += l
                    .waiters()
                    .map(|w| w.permits as usize + w.ttl as usize % 7)
                    .sum::<usize>();
                let _ = (l.hold_of(o(owner), now), l.mode(now), l.is_empty(), n);
                let _ = (
                    l.next_deadline(),
                    l.last_deadline(),
                    l.last_token(),
                    world.next_wakeup(l),
                    l.limit(),
                    l.permits_used(),
                    l.heap_bytes_rounded(|n| n.next_power_of_two()),
                );
                let e = Election(std::mem::take(&mut slots[*slot]));
                let _ = e.current(now).map(|h| h.hold.token);
                slots[*slot] = e.0;
                let _ = format!("{:?}", slots[*slot]).len();
            }
            Op::Apply { slot, effect } => {
                let e = effect.build(owners);
                slots[*slot].apply(&e, &mut world.tokens);
                if *slot == 0 {
                    replica.apply(&e, replica_tokens);
                }
            }
            Op::Restore { slot, owner, hold } => slots[*slot].restore(o(owner), *hold),
            Op::ObserveToken { slot, token } => slots[*slot].observe_token(*token),
            Op::TokensObserve(t) => world.tokens.observe(*t),
            Op::TokensIssue { key_last } => {
                let _ = world.tokens.issue(*key_last, now);
            }
            Op::Delete { slot } => {
                slots[*slot] = Lock::default();
                if *slot == 0 {
                    *replica = Lock::default();
                }
            }
            Op::Kill(id) => world.leave(*id),
            Op::Oracle(m) => world.set_oracle(match m {
                0 => Oracle::UnlessLeft,
                1 => Oracle::AllAlive,
                2 => Oracle::AllGone,
                _ => Oracle::Flaky,
            }),
        }
        if world.grants == Grants::Held {
            stats.held_ops += 1;
        }
        if let Some((slot, changes)) = out {
            // Sanity checks on what any operation reports.
            assert_eq!(
                changes.is_empty(),
                changes.effects.is_empty()
                    && changes.woken.is_empty()
                    && changes.timed_out.is_empty()
            );
            stats.woken += changes.woken.len() as u64;
            stats.timed_out += changes.timed_out.len() as u64;
            stats.effects += changes.effects.len() as u64;
            for e in &changes.effects {
                let _ = e.owner();
                if slot == 0 {
                    replica.apply(e, replica_tokens);
                }
            }
        }
        let _ = (
            format!("{:?}", LockError::UpgradeDeadlock),
            format!("{:?}", LockError::TooManyWaiters(usize::MAX)),
            format!("{:?}", LockError::LimitMismatch { limit: u32::MAX }),
            format!("{:?}", LockError::PermitsMismatch { permits: 0 }),
        );
    }
}

/// Runs `f` on `lock` treated as a key of `kind`, and gives the lock back.
fn keyed<T>(
    kind: Kind,
    lock: Lock,
    f: impl FnOnce(&mut dyn KeyedOps, &mut Env) -> (Changes, T),
    env: &mut Env,
) -> (Lock, (Changes, T)) {
    match kind {
        Kind::Rw => {
            let mut k = RwLock(lock);
            let out = f(&mut k, env);
            (k.0, out)
        }
        Kind::El => {
            let mut k = Election(lock);
            let out = f(&mut k, env);
            (k.0, out)
        }
        Kind::Sem => {
            let mut k = Semaphore(lock);
            let out = f(&mut k, env);
            (k.0, out)
        }
    }
}

/// `Keyed`'s operations, object-safe.
trait KeyedOps {
    fn tick(&mut self, env: &mut Env) -> Changes;
    fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool);
}

// (`Keyed` is not imported: its `lock(&self)` would shadow `RwLock::lock`.)
impl<K: redis_lease_core::Keyed> KeyedOps for K {
    fn tick(&mut self, env: &mut Env) -> Changes {
        redis_lease_core::Keyed::tick(self, env)
    }
    fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        redis_lease_core::Keyed::cancel(self, id, env)
    }
}

fn count(stats: &mut Stats, r: Result<Acquire, LockError>) {
    match r {
        Ok(Acquire::Granted(_)) => stats.granted += 1,
        Ok(Acquire::Queued) => stats.queued += 1,
        Ok(Acquire::Busy) => stats.busy += 1,
        Err(e) => {
            stats.refused += 1;
            assert!(!format!("{e:?}").is_empty());
        }
    }
}

thread_local! {
    /// The last panic on this thread: (message, file:line).
    static LAST_PANIC: RefCell<Option<(String, String)>> = const { RefCell::new(None) };
}

/// Records every panic's message and location for the thread that panicked.
fn install_hook() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
                s.to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "?".to_string()
            };
            let loc = info
                .location()
                .map(|l| format!("{}:{}", l.file(), l.line()))
                .unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some((msg, loc)));
            default(info);
        }));
    });
}

/// Runs `ops` operations from `seed`; answers what they reached.
fn fuzz(seed: u64, ops: u64) -> Stats {
    install_hook();
    let progress = Arc::new(AtomicU64::new(0));
    let (done_tx, done_rx) = mpsc::channel();
    let p = progress.clone();
    let worker = std::thread::spawn(move || {
        let mut rng = Rng(seed);
        let mut state = State::new();
        for i in 0..ops {
            p.store(i, Ordering::Relaxed);
            let op = state.gen(&mut rng);
            let r = panic::catch_unwind(AssertUnwindSafe(|| state.exec(&op)));
            let exhausted = state.world.tokens.high_water() == Tokens::MAX
                || state.world.now.saturating_mul(1000) > Tokens::MAX;
            if r.is_ok() && exhausted {
                // Tokens ran out (an extreme clock or token): every new grant is refused from
                // here on, by design. Start over as a fresh server would, keeping the counts.
                let stats = state.stats;
                state = State::new();
                state.stats = stats;
                continue;
            }
            if r.is_err() {
                let (msg, loc) = LAST_PANIC
                    .with(|p| p.borrow_mut().take())
                    .unwrap_or_default();
                panic!(
                    "operation #{i} (seed {seed:#x}) panicked: {msg} at {loc}\n  op: {op:?}\n  \
                     clock: {}, tokens high-water: {}",
                    state.world.now,
                    state.world.tokens.high_water()
                );
            }
        }
        let _ = done_tx.send(());
        state.stats
    });
    // A watchdog: an operation that never returns is a bug too (a blocked Redis server).
    if let Err(mpsc::RecvTimeoutError::Timeout) = done_rx.recv_timeout(Duration::from_secs(120)) {
        panic!(
            "seed {seed:#x}: no progress in 120 s, stuck at or after operation #{}",
            progress.load(Ordering::Relaxed)
        );
    }
    match worker.join() {
        Ok(out) => out,
        Err(e) => panic::resume_unwind(e),
    }
}

/// One run, and a check that it reached the interesting states (it is not shallow).
fn fuzz_and_check(seed: u64) {
    let stats = fuzz(seed, OPS);
    eprintln!("fuzz seed {seed:#x}: {OPS} operations; {stats:?}");
    assert!(stats.granted > OPS / 50 && stats.queued > OPS / 100 && stats.woken > OPS / 200);
    assert!(stats.timed_out > OPS / 1000 && stats.sem_granted > OPS / 500);
    assert!(stats.held_ops > OPS / 20 && stats.requeued > OPS / 1000);
}

#[test]
fn fuzz_ops_do_not_panic() {
    for seed in [0x5eed_0001u64, 0x0dd_ba11] {
        fuzz_and_check(seed);
    }
}

/// (This test once ran the first seed without tolerating a known overflow; that bug is fixed,
/// so it runs a seed of its own, in parallel with the other.)
#[test]
fn fuzz_ops_do_not_panic_on_a_third_seed() {
    fuzz_and_check(0xc0ff_ee03);
}
