//! A bounded, seeded fuzz of the core's public API: arbitrary operations with extreme values
//! (ttl = u64::MAX, a clock near u64::MAX or going backwards, empty and huge owners, duplicate
//! and extreme waiter ids, max-waiters 0, effects and RDB holds that break the rules, a flaky
//! `alive` oracle, a key driven as a lock and as an election) must never panic: inside Redis a
//! panic kills the server. Every operation runs under `catch_unwind`; a panic fails the test
//! with the seed, the operation's number and the operation itself.

mod harness;

use std::cell::RefCell;
use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Once};
use std::time::Duration;

use harness::{request, Oracle, World, START};
use redis_lease_core::{
    Acquire, Changes, DropReason, Effect, Election, Hold, Lock, LockError, Mode, RwLock, Tokens,
    Wait,
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
    ]
}

/// One operation, with its arguments (owners by index into `owners()`, to keep reports short).
#[derive(Clone, Debug)]
enum Op {
    SetClock(u64),
    Advance(u64),
    Lock {
        slot: usize,
        owner: usize,
        mode: Mode,
        ttl: u64,
        wait: Option<u64>,
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
        election: bool,
    },
    Tick {
        slot: usize,
        election: bool,
    },
    Cancel {
        slot: usize,
        id: u64,
        election: bool,
    },
    Campaign {
        slot: usize,
        owner: usize,
        ttl: u64,
        wait: Option<u64>,
        max_waiters: usize,
    },
    Resign {
        slot: usize,
        owner: usize,
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
    fn build(&self, owners: &[Vec<u8>]) -> Effect {
        let o = |i: &usize| owners[*i].clone().into();
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
    owners: Vec<Vec<u8>>,
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
    effects: u64,
}

impl State {
    fn new() -> State {
        State {
            owners: owners(),
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
        let wait = if rng.chance(60) { Some(id) } else { None };
        match rng.below(100) {
            0..=2 => Op::SetClock(match rng.below(24) {
                0 => u64::MAX,
                1 => u64::MAX - rng.below(1000),
                2 => u64::MAX / 1000 + rng.below(3),
                3 => 0,
                4 => rng.next(),
                5..=8 => self.world.now.saturating_sub(rng.below(1000)),
                _ => 1_700_000_000_000 + rng.below(1_000_000),
            }),
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
                election: rng.chance(50),
            },
            48..=52 => Op::Tick {
                slot,
                election: rng.chance(50),
            },
            53..=57 => Op::Cancel {
                slot,
                id,
                election: rng.chance(50),
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
                let effect = match rng.below(4) {
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
            _ => Op::Oracle(rng.below(4) as u8),
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
        let o = |i: &usize| owners[*i].as_slice();
        let mut out: Option<(usize, Changes)> = None;
        match op {
            Op::SetClock(t) => world.now = *t,
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
                let req = request(o(owner), *mode, *ttl, *wait, *max_waiters);
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
                election,
            } => {
                let lock = std::mem::take(&mut slots[*slot]);
                let (lock, c) = if *election {
                    let mut e = Election(lock);
                    let (c, _) = e.renew(o(owner), *ttl, &mut world.env());
                    (e.0, c)
                } else {
                    let mut l = RwLock(lock);
                    let (c, _) = l.renew(o(owner), *ttl, &mut world.env());
                    (l.0, c)
                };
                slots[*slot] = lock;
                out = Some((*slot, c));
            }
            Op::Tick { slot, election } => {
                let lock = std::mem::take(&mut slots[*slot]);
                let (lock, c) = if *election {
                    let mut e = Election(lock);
                    let c = e.tick(&mut world.env());
                    (e.0, c)
                } else {
                    let mut l = RwLock(lock);
                    let c = l.tick(&mut world.env());
                    (l.0, c)
                };
                slots[*slot] = lock;
                out = Some((*slot, c));
            }
            Op::Cancel { slot, id, election } => {
                let lock = std::mem::take(&mut slots[*slot]);
                let (lock, c) = if *election {
                    let mut e = Election(lock);
                    let (c, _) = e.cancel(*id, &mut world.env());
                    (e.0, c)
                } else {
                    let mut l = RwLock(lock);
                    let (c, _) = l.cancel(*id, &mut world.env());
                    (l.0, c)
                };
                slots[*slot] = lock;
                out = Some((*slot, c));
            }
            Op::Campaign {
                slot,
                owner,
                ttl,
                wait,
                max_waiters,
            } => {
                let mut e = Election(std::mem::take(&mut slots[*slot]));
                let (c, r) = e.campaign(
                    o(owner),
                    *ttl,
                    wait.map(Wait::forever),
                    *max_waiters,
                    &mut world.env(),
                );
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
                let _ = (l.hold_of(o(owner), now), l.mode(now), l.is_empty(), n);
                let _ = (
                    l.next_deadline(),
                    l.last_deadline(),
                    l.last_token(),
                    l.next_wakeup(),
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
        if let Some((slot, changes)) = out {
            // Sanity checks on what any operation reports.
            assert_eq!(
                changes.is_empty(),
                changes.effects.is_empty() && changes.woken.is_empty()
            );
            stats.woken += changes.woken.len() as u64;
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
        );
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

#[test]
fn fuzz_ops_do_not_panic() {
    for seed in [0x5eed_0001u64, 0x0dd_ba11] {
        let stats = fuzz(seed, OPS);
        eprintln!("fuzz seed {seed:#x}: {OPS} operations; {stats:?}");
        assert!(stats.granted > OPS / 50 && stats.queued > OPS / 100 && stats.woken > OPS / 200);
    }
}

#[test]
fn fuzz_ops_do_not_panic_strict() {
    fuzz(0x5eed_0001, OPS);
}
