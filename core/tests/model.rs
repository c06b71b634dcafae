//! Model-based, invariant and replay properties of the pure core.
//!
//! * `rwlock_matches_the_model` / `election_matches_the_model`: a deliberately simple reference
//!   model of one key (a `Vec` of holders, a `Vec` of waiters in arrival order, linear scans)
//!   written from docs/COMMANDS.md, driven in lockstep with the real [`RwLock`] / [`Election`] by
//!   random operations; every reply, every woken waiter and the visible state are compared
//!   after each step. Tokens are compared by relative order (the model counts 1, 2, 3...; the
//!   core adds a clock floor), through an order-preserving map.
//! * `rwlock_invariants` / `election_invariants`: properties checked on the core alone.
//! * `replaying_effects_rebuilds_the_state`: `Changes.effects` applied with `Lock::apply` to a
//!   fresh `Lock` and a fresh `Tokens` give the same holders, last token and high-water mark.
//! * Targeted tests of the corners the properties reach rarely: the top of the token range,
//!   upgrades beside other upgrades, an upgrade whose read hold lapsed, waiters that left.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError};
mod harness;

use harness::{request, World, START};
use redis_lease_core::{
    Acquire, Changes, Effect, Election, Lock, LockError, Mode, Request, RwLock, Tokens, Wait,
};

type TestResult = Result<(), TestCaseError>;

/// Large enough never to be reached by a generated run (the limit has its own test in rules.rs;
/// note that the core counts waiters that left but were not skipped yet against it).
const MAX_WAITERS: usize = 10_000;

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    }
}

fn name(owner: usize) -> Vec<u8> {
    format!("owner-{owner}").into_bytes()
}

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

/// A generated operation; `Index` picks among the waiters present when it runs.
#[derive(Clone, Debug)]
enum Op {
    /// RLOCK / WLOCK (for an election: CAMPAIGN; `write` is ignored).
    Lock {
        owner: usize,
        write: bool,
        ttl: u64,
        wait: bool,
    },
    /// UNLOCK (for an election: RESIGN).
    Unlock {
        owner: usize,
    },
    Renew {
        owner: usize,
        ttl: u64,
    },
    /// A queued waiter times out or is unblocked.
    Cancel(Index),
    /// Cancel of an id that is not (or no longer) queued.
    CancelUnknown,
    /// A queued waiter's connection goes away (the `alive` oracle says false from now on).
    Kill(Index),
    Advance(u64),
    Tick,
}

/// An operation with its concrete arguments.
#[derive(Clone, Debug)]
enum Act {
    Lock {
        owner: usize,
        mode: Mode,
        ttl: u64,
        wait: Option<u64>,
    },
    Unlock {
        owner: usize,
    },
    Renew {
        owner: usize,
        ttl: u64,
    },
    Cancel(u64),
    Kill(u64),
    Advance(u64),
    Tick,
}

impl Act {
    /// True for the operations that call into the core.
    fn is_core_op(&self) -> bool {
        !matches!(self, Act::Kill(_) | Act::Advance(_))
    }
}

fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![
        20 => 1..=30u64,
        10 => 1..=300u64,
        3 => 1_000..=100_000u64,
        1 => Just(u64::MAX),
    ]
}

fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => 0..=5u64,
        4 => 1..=40u64,
        2 => 41..=400u64,
        1 => 1_000..=10_000_000u64,
        1 => 1_000_000_000..=1_000_000_000_000u64,
    ]
}

fn op(owners: usize) -> impl Strategy<Value = Op> {
    prop_oneof![
        12 => (0..owners, any::<bool>(), ttl(), prop::bool::weighted(0.6))
            .prop_map(|(owner, write, ttl, wait)| Op::Lock { owner, write, ttl, wait }),
        6 => (0..owners).prop_map(|owner| Op::Unlock { owner }),
        2 => (0..owners, ttl()).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
        2 => any::<Index>().prop_map(Op::Cancel),
        1 => Just(Op::CancelUnknown),
        2 => any::<Index>().prop_map(Op::Kill),
        4 => advance().prop_map(Op::Advance),
        2 => Just(Op::Tick),
    ]
}

/// (number of owners, replace the key by a fresh one whenever it empties, operations)
fn scenario(max_len: usize) -> impl Strategy<Value = (usize, bool, Vec<Op>)> {
    (3usize..=5).prop_flat_map(move |n| {
        (
            Just(n),
            any::<bool>(),
            prop::collection::vec(op(n), 1..max_len),
        )
    })
}

// ---------------------------------------------------------------------------------------------
// The system under test
// ---------------------------------------------------------------------------------------------

enum Key {
    Rw(RwLock),
    El(Election),
}

impl Key {
    fn new(election: bool) -> Key {
        if election {
            Key::El(Election::default())
        } else {
            Key::Rw(RwLock::default())
        }
    }

    fn lock(&self) -> &Lock {
        match self {
            Key::Rw(l) => &l.0,
            Key::El(e) => &e.0,
        }
    }

    fn is_election(&self) -> bool {
        matches!(self, Key::El(_))
    }
}

/// A reply, whatever the command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    Acquire(Result<Acquire, LockError>),
    Bool(bool),
    Token(Option<u64>),
    Nothing,
}

struct Sut {
    key: Key,
    world: World,
    /// Every waiter id ever handed out.
    used: HashSet<u64>,
}

impl Sut {
    fn new(election: bool) -> Sut {
        Sut {
            key: Key::new(election),
            world: World::at(START),
            used: HashSet::new(),
        }
    }

    fn alive(&self, id: u64) -> bool {
        self.world.alive(id)
    }

    /// The waiters whose connection is still there, in the order they will be served.
    fn alive_waiters(&self) -> Vec<(u64, Vec<u8>, Mode, u64)> {
        self.key
            .lock()
            .waiters()
            .filter(|w| self.alive(w.id))
            .map(|w| (w.id, w.owner.to_vec(), w.mode, w.ttl))
            .collect()
    }

    fn pick_waiter(&self, i: &Index) -> Option<u64> {
        let ws = self.alive_waiters();
        (!ws.is_empty()).then(|| ws[i.index(ws.len())].0)
    }

    /// Gives an operation its concrete arguments (waiter ids).
    fn resolve(&mut self, op: &Op) -> Act {
        match op {
            Op::Lock {
                owner,
                write,
                ttl,
                wait,
            } => {
                let wait = wait.then(|| {
                    let id = self.world.next_id();
                    self.used.insert(id);
                    id
                });
                let mode = if *write || self.key.is_election() {
                    Mode::Write
                } else {
                    Mode::Read
                };
                Act::Lock {
                    owner: *owner,
                    mode,
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
        }
    }

    /// Runs one operation: its reply and changes, `None` for the ones the core does not see.
    fn act(&mut self, act: &Act) -> Option<(Reply, Changes)> {
        match act {
            Act::Kill(id) => {
                self.world.leave(*id);
                return None;
            }
            Act::Advance(ms) => {
                self.world.now = self.world.now.saturating_add(*ms);
                return None;
            }
            _ => {}
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
                },
            ) => {
                let o = name(*owner);
                let req = Request {
                    owner: &o,
                    mode: *mode,
                    ttl: *ttl,
                    wait: wait.map(Wait::forever),
                    max_waiters: MAX_WAITERS,
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
                let (c, r) = e.campaign(
                    &name(*owner),
                    *ttl,
                    wait.map(Wait::forever),
                    MAX_WAITERS,
                    &mut env,
                );
                (Reply::Acquire(r), c)
            }
            (Key::Rw(l), Act::Unlock { owner }) => {
                let (c, r) = l.unlock(&name(*owner), &mut env);
                (Reply::Bool(r), c)
            }
            (Key::El(e), Act::Unlock { owner }) => {
                let (c, r) = e.resign(&name(*owner), &mut env);
                (Reply::Bool(r), c)
            }
            (Key::Rw(l), Act::Renew { owner, ttl }) => {
                let (c, r) = l.renew(&name(*owner), *ttl, &mut env);
                (Reply::Token(r), c)
            }
            (Key::El(e), Act::Renew { owner, ttl }) => {
                let (c, r) = e.renew(&name(*owner), *ttl, &mut env);
                (Reply::Token(r), c)
            }
            (Key::Rw(l), Act::Cancel(id)) => {
                let (c, r) = l.cancel(*id, &mut env);
                (Reply::Bool(r), c)
            }
            (Key::El(e), Act::Cancel(id)) => {
                let (c, r) = e.cancel(*id, &mut env);
                (Reply::Bool(r), c)
            }
            (Key::Rw(l), Act::Tick) => (Reply::Nothing, l.tick(&mut env)),
            (Key::El(e), Act::Tick) => (Reply::Nothing, e.tick(&mut env)),
            (_, Act::Kill(_) | Act::Advance(_)) => unreachable!(),
        };
        Some(out)
    }

    /// Replaces an empty key by a fresh one (the key was deleted), keeping the token source.
    fn reset_if_empty(&mut self) -> bool {
        if self.key.lock().is_empty() {
            self.key = Key::new(self.key.is_election());
            true
        } else {
            false
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct MHolder {
    owner: usize,
    reads: u32,
    writes: u32,
    deadline: u64,
    token: u64,
}

#[derive(Clone, Debug)]
struct MWaiter {
    id: u64,
    owner: usize,
    mode: Mode,
    ttl: u64,
    /// A current reader asking for the write lock: it waits ahead of everyone.
    upgrade: bool,
}

/// One key, as docs/COMMANDS.md describes it. Tokens are 1, 2, 3... in order of issue.
///
/// Where the contract leaves a choice the model takes the core's: an upgrade also keeps the
/// longer of the two leases; a leader's CAMPAIGN sets its lease exactly like RENEW; a waiting
/// upgrade whose read hold ended goes back to its place in arrival order; a write request that a
/// current reader queued before it became a reader counts as a waiting upgrade; the DEADLOCK
/// error answers only an upgrade that asked to WAIT.
#[derive(Debug, Default)]
struct Model {
    election: bool,
    now: u64,
    holders: Vec<MHolder>,
    /// In the order they will be served: an upgrade (if any) first, then arrival order.
    waiters: Vec<MWaiter>,
    /// Tokens issued so far, over every key (the server-wide source).
    issued: u64,
    /// The last token of this key (0 for a fresh key).
    key_last: u64,
}

impl Model {
    fn new(election: bool) -> Model {
        Model {
            election,
            now: START,
            ..Model::default()
        }
    }

    fn pos(&self, owner: usize) -> Option<usize> {
        self.holders.iter().position(|h| h.owner == owner)
    }

    fn new_token(&mut self) -> u64 {
        self.issued += 1;
        self.key_last = self.issued;
        self.issued
    }

    /// May `owner` take `mode` now, the queue aside?
    fn admissible(&self, owner: usize, mode: Mode) -> bool {
        let mine = self.pos(owner).map(|i| &self.holders[i]);
        match mode {
            // Readers share with readers; a holder may always add a read hold.
            Mode::Read => mine.is_some() || self.holders.iter().all(|h| h.writes == 0),
            // A writer excludes every other holder; a writer may take the write lock again.
            Mode::Write => {
                mine.is_some_and(|h| h.writes > 0) || self.holders.iter().all(|h| h.owner == owner)
            }
        }
    }

    fn grant(&mut self, owner: usize, mode: Mode, ttl: u64) -> u64 {
        let deadline = self.now.saturating_add(ttl);
        match self.pos(owner) {
            // A leader campaigning again: a renewal, same term.
            Some(i) if self.election => {
                self.holders[i].deadline = deadline;
                self.holders[i].token
            }
            Some(i) => {
                // Reentrant (same token) unless a reader upgrades (new token).
                let reentrant = mode == Mode::Read || self.holders[i].writes > 0;
                if !reentrant {
                    let t = self.new_token();
                    self.holders[i].token = t;
                }
                let h = &mut self.holders[i];
                match mode {
                    Mode::Read => h.reads += 1,
                    Mode::Write => h.writes += 1,
                }
                // Never shortens the lease.
                h.deadline = h.deadline.max(deadline);
                h.token
            }
            None => {
                let token = self.new_token();
                self.holders.push(MHolder {
                    owner,
                    reads: u32::from(mode == Mode::Read),
                    writes: u32::from(mode == Mode::Write),
                    deadline,
                    token,
                });
                token
            }
        }
    }

    /// Serves the head of the queue for as long as it can be granted.
    fn serve(&mut self, woken: &mut Vec<(u64, u64)>) {
        // A waiting upgrade whose owner no longer holds is an ordinary request: back to its
        // place in arrival order.
        if let Some(w) = self.waiters.first() {
            if w.upgrade && self.pos(w.owner).is_none() {
                let mut w = self.waiters.remove(0);
                w.upgrade = false;
                let at = self
                    .waiters
                    .iter()
                    .position(|o| !o.upgrade && o.id > w.id)
                    .unwrap_or(self.waiters.len());
                self.waiters.insert(at, w);
            }
        }
        while let Some(w) = self.waiters.first() {
            if !self.admissible(w.owner, w.mode) {
                break;
            }
            let w = self.waiters.remove(0);
            let token = self.grant(w.owner, w.mode, w.ttl);
            woken.push((w.id, token));
        }
    }

    /// What happens at the start of every command: lapsed leases end, waiters are served.
    /// Time passes in order: at each deadline up to now, every lease that ends by then lapses
    /// and the waiters are served.
    fn begin(&mut self, woken: &mut Vec<(u64, u64)>) {
        let now = self.now;
        while let Some(t) = self
            .holders
            .iter()
            .map(|h| h.deadline)
            .filter(|d| *d <= now)
            .min()
        {
            self.holders.retain(|h| t < h.deadline);
            self.serve(woken);
        }
        self.serve(woken);
    }

    fn lock(
        &mut self,
        owner: usize,
        mode: Mode,
        ttl: u64,
        wait: Option<u64>,
        woken: &mut Vec<(u64, u64)>,
    ) -> Result<Acquire, LockError> {
        self.begin(woken);
        let writes = self.pos(owner).map(|i| self.holders[i].writes);
        let upgrade = !self.election && mode == Mode::Write && writes == Some(0);
        if writes.is_some() && !upgrade {
            return Ok(Acquire::Granted(self.grant(owner, mode, ttl)));
        }
        if upgrade {
            if self.holders.len() == 1 {
                return Ok(Acquire::Granted(self.grant(owner, mode, ttl)));
            }
            // Another current reader already waits for the write lock (as an upgrade, or
            // with a write request it queued before it became a reader).
            let other_upgrade = self
                .waiters
                .iter()
                .any(|w| w.mode == Mode::Write && w.owner != owner && self.pos(w.owner).is_some());
            if other_upgrade && wait.is_some() {
                return Err(LockError::UpgradeDeadlock);
            }
        } else if self.waiters.is_empty() && self.admissible(owner, mode) {
            return Ok(Acquire::Granted(self.grant(owner, mode, ttl)));
        }
        let Some(id) = wait else {
            return Ok(Acquire::Busy);
        };
        let w = MWaiter {
            id,
            owner,
            mode,
            ttl,
            upgrade,
        };
        if upgrade && !self.waiters.iter().any(|w| w.upgrade) {
            self.waiters.insert(0, w);
        } else {
            // A second upgrade request of the same owner waits in arrival order.
            self.waiters.push(MWaiter {
                upgrade: false,
                ..w
            });
        }
        Ok(Acquire::Queued)
    }

    fn unlock(&mut self, owner: usize, woken: &mut Vec<(u64, u64)>) -> bool {
        self.begin(woken);
        let Some(i) = self.pos(owner) else {
            return false;
        };
        let h = &mut self.holders[i];
        if self.election {
            h.reads = 0;
            h.writes = 0;
        } else if h.writes > 0 {
            h.writes -= 1;
        } else {
            h.reads -= 1;
        }
        if h.reads == 0 && h.writes == 0 {
            self.holders.remove(i);
        }
        self.serve(woken);
        true
    }

    fn renew(&mut self, owner: usize, ttl: u64, woken: &mut Vec<(u64, u64)>) -> Option<u64> {
        self.begin(woken);
        let i = self.pos(owner)?;
        self.holders[i].deadline = self.now.saturating_add(ttl);
        Some(self.holders[i].token)
    }

    fn cancel(&mut self, id: u64, woken: &mut Vec<(u64, u64)>) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|w| w.id != id);
        let found = self.waiters.len() != before;
        self.begin(woken);
        found
    }

    fn act(&mut self, act: &Act) -> (Reply, Vec<(u64, u64)>) {
        let mut woken = vec![];
        let reply = match act {
            Act::Lock {
                owner,
                mode,
                ttl,
                wait,
            } => Reply::Acquire(self.lock(*owner, *mode, *ttl, *wait, &mut woken)),
            Act::Unlock { owner } => Reply::Bool(self.unlock(*owner, &mut woken)),
            Act::Renew { owner, ttl } => Reply::Token(self.renew(*owner, *ttl, &mut woken)),
            Act::Cancel(id) => Reply::Bool(self.cancel(*id, &mut woken)),
            Act::Tick => {
                self.begin(&mut woken);
                Reply::Nothing
            }
            Act::Kill(id) => {
                // A waiter that left is never served: for the model it is simply gone.
                self.waiters.retain(|w| w.id != *id);
                Reply::Nothing
            }
            Act::Advance(ms) => {
                self.now = self.now.saturating_add(*ms);
                Reply::Nothing
            }
        };
        (reply, woken)
    }

    fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty()
    }

    fn reset(&mut self) {
        assert!(self.is_empty());
        self.key_last = 0;
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing tokens by order
// ---------------------------------------------------------------------------------------------

/// Maps model tokens to core tokens: the first time a model token is seen, the core's token must
/// be above every core token seen before; afterwards it must be the same core token.
#[derive(Default)]
struct TokenMap {
    map: HashMap<u64, u64>,
    last_real: u64,
}

impl TokenMap {
    fn check(&mut self, model: u64, real: u64) -> TestResult {
        match self.map.get(&model) {
            Some(&r) => prop_assert_eq!(r, real, "model token {} maps to {}", model, r),
            None => {
                prop_assert!(
                    real > self.last_real,
                    "new token {} (model {}) not above the last one {}",
                    real,
                    model,
                    self.last_real
                );
                self.last_real = real;
                self.map.insert(model, real);
            }
        }
        Ok(())
    }

    fn real(&self, model: u64) -> u64 {
        if model == 0 {
            return 0;
        }
        *self
            .map
            .get(&model)
            .expect("every model token was reported by a reply or a woken waiter")
    }

    fn reply(&mut self, model: Reply, real: Reply) -> TestResult {
        match (model, real) {
            (Reply::Acquire(Ok(Acquire::Granted(m))), Reply::Acquire(Ok(Acquire::Granted(r))))
            | (Reply::Token(Some(m)), Reply::Token(Some(r))) => self.check(m, r),
            (m, r) => {
                prop_assert_eq!(m, r, "reply");
                Ok(())
            }
        }
    }
}

type HolderRow = (Vec<u8>, u32, u32, u64, u64);

fn real_holders<'a>(
    views: impl Iterator<Item = redis_lease_core::HolderView<'a>>,
) -> Vec<HolderRow> {
    let mut v: Vec<_> = views
        .map(|h| {
            (
                h.owner.to_vec(),
                h.hold.reads,
                h.hold.writes,
                h.hold.deadline,
                h.hold.token,
            )
        })
        .collect();
    v.sort();
    v
}

fn model_holders(m: &Model, map: &TokenMap) -> Vec<HolderRow> {
    let mut v: Vec<_> = m
        .holders
        .iter()
        .filter(|h| m.now < h.deadline)
        .map(|h| {
            (
                name(h.owner),
                h.reads,
                h.writes,
                h.deadline,
                map.real(h.token),
            )
        })
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// 1. Model-based property
// ---------------------------------------------------------------------------------------------

fn run_against_model(election: bool, reset: bool, ops: &[Op]) -> TestResult {
    let mut sut = Sut::new(election);
    let mut model = Model::new(election);
    let mut map = TokenMap::default();
    for (step, op) in ops.iter().enumerate() {
        let act = sut.resolve(op);
        let real = sut.act(&act);
        let (m_reply, m_woken) = model.act(&act);
        let ctx = format!("step {step}: {act:?}");
        if let Some((r_reply, changes)) = &real {
            // Woken waiters first: they are served before the request itself is decided.
            let r_ids: Vec<u64> = changes.woken.iter().map(|w| w.waiter).collect();
            let m_ids: Vec<u64> = m_woken.iter().map(|w| w.0).collect();
            prop_assert_eq!(&r_ids, &m_ids, "woken ids at {}", ctx);
            for (w, m) in changes.woken.iter().zip(&m_woken) {
                map.check(m.1, w.token)
                    .map_err(|e| TestCaseError::fail(format!("{e} (woken, {ctx})")))?;
            }
            map.reply(m_reply, *r_reply)
                .map_err(|e| TestCaseError::fail(format!("{e} (reply, {ctx})")))?;
        } else {
            prop_assert!(m_woken.is_empty());
        }
        prop_assert_eq!(sut.world.now, model.now);
        let lock = sut.key.lock();
        let now = sut.world.now;
        prop_assert_eq!(
            real_holders(lock.live_holders(now)),
            model_holders(&model, &map),
            "live holders after {}",
            ctx
        );
        let m_waiters: Vec<_> = model
            .waiters
            .iter()
            .map(|w| (w.id, name(w.owner), w.mode, w.ttl))
            .collect();
        prop_assert_eq!(sut.alive_waiters(), m_waiters, "waiters after {}", ctx);
        let m_mode = if model
            .holders
            .iter()
            .any(|h| now < h.deadline && h.writes > 0)
        {
            Some(Mode::Write)
        } else if model.holders.iter().any(|h| now < h.deadline) {
            Some(Mode::Read)
        } else {
            None
        };
        prop_assert_eq!(lock.mode(now), m_mode, "mode after {}", ctx);
        if act.is_core_op() {
            prop_assert_eq!(lock.is_empty(), model.is_empty(), "is_empty after {}", ctx);
            prop_assert_eq!(lock.holder_count(), model.holders.len(), "after {}", ctx);
            prop_assert!(lock.waiter_count() >= model.waiters.len());
            prop_assert_eq!(lock.last_token(), map.real(model.key_last), "after {}", ctx);
            if reset && sut.reset_if_empty() {
                model.reset();
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(700))]

    #[test]
    fn rwlock_matches_the_model((_owners, reset, ops) in scenario(200)) {
        run_against_model(false, reset, &ops)?;
    }

    #[test]
    fn election_matches_the_model((_owners, reset, ops) in scenario(120)) {
        run_against_model(true, reset, &ops)?;
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Invariants, on the core alone
// ---------------------------------------------------------------------------------------------

/// What the invariant checks remember across a run.
#[derive(Default)]
struct Seen {
    /// The highest token of any grant so far (over every key).
    max_token: u64,
    /// The previous state, rebuilt from the effects (tells a reentrant grant from a new one).
    shadow: Lock,
    shadow_tokens: Tokens,
    /// Waiter ids that were queued as an upgrade (they may go ahead of earlier waiters).
    upgrades: HashSet<u64>,
    /// The last ordinary (non-upgrade) waiter that was granted.
    last_fifo_woken: u64,
    /// Election: which candidate each term belonged to, and the highest term.
    terms: HashMap<u64, Vec<u8>>,
    max_term: u64,
}

/// `owner` may take `mode`, given these live holders and ignoring the queue.
fn admissible(holders: &[HolderRow], owner: &[u8], mode: Mode) -> bool {
    let mine = holders.iter().find(|h| h.0 == owner);
    match mode {
        Mode::Read => mine.is_some() || holders.iter().all(|h| h.2 == 0),
        Mode::Write => mine.is_some_and(|h| h.2 > 0) || holders.iter().all(|h| h.0 == owner),
    }
}

fn check_invariants(
    sut: &Sut,
    seen: &mut Seen,
    act: &Act,
    out: &Option<(Reply, Changes)>,
) -> TestResult {
    let lock = sut.key.lock();
    let now = sut.world.now;
    let live = real_holders(lock.live_holders(now));

    // Never a writer beside another holder (live or not yet pruned).
    let all = real_holders(lock.holders());
    if all.iter().any(|h| h.2 > 0) {
        prop_assert_eq!(all.len(), 1, "a writer beside another holder: {:?}", all);
    }
    // No holder visible past its deadline.
    for h in &live {
        prop_assert!(now < h.3, "holder {:?} visible at {}", h, now);
    }
    prop_assert_eq!(lock.mode(now).is_some(), !live.is_empty());
    for h in &all {
        let view = lock.hold_of(&h.0, now);
        prop_assert_eq!(view.is_some(), now < h.3);
    }

    if let Some((reply, changes)) = out {
        // Tokens: a reentrant grant keeps the owner's token; any other grant is above every
        // earlier token, also across fresh keys.
        let granted = matches!(
            (act, reply),
            (Act::Lock { .. }, Reply::Acquire(Ok(Acquire::Granted(_))))
        );
        // The request's own grant is the last effect: the state just before it is the state
        // the request was decided on.
        let mut decided_on = None;
        for (i, e) in changes.effects.iter().enumerate() {
            if granted && i + 1 == changes.effects.len() {
                let holders = real_holders(seen.shadow.holders());
                decided_on = Some(holders);
            }
            if let Effect::Grant {
                owner, mode, token, ..
            } = e
            {
                let prev = seen
                    .shadow
                    .holders()
                    .find(|h| h.owner == &**owner)
                    .map(|h| h.hold);
                let reentrant = matches!(prev, Some(h) if *mode == Mode::Read || h.writes > 0);
                if reentrant {
                    prop_assert_eq!(*token, prev.unwrap().token, "reentrant grant, {:?}", act);
                } else {
                    prop_assert!(
                        *token > seen.max_token,
                        "token {} after {}",
                        token,
                        seen.max_token
                    );
                    seen.max_token = *token;
                }
            }
            seen.shadow.apply(e, &mut seen.shadow_tokens);
        }
        // After a command every stored holder is live (lapsed ones were pruned).
        prop_assert_eq!(&all, &live, "lapsed holders left after {:?}", act);

        // FIFO: ordinary waiters are granted in arrival order, none is passed over.
        for w in &changes.woken {
            if !seen.upgrades.contains(&w.waiter) {
                prop_assert!(
                    w.waiter > seen.last_fifo_woken,
                    "waiter {} granted after {}",
                    w.waiter,
                    seen.last_fifo_woken
                );
                seen.last_fifo_woken = w.waiter;
            }
        }
        let waiting = sut.alive_waiters();
        for w in &waiting {
            if !seen.upgrades.contains(&w.0) {
                prop_assert!(w.0 > seen.last_fifo_woken, "waiter {} was passed over", w.0);
            }
        }
        // The head of the queue is served as soon as it can be (a run of readers together).
        if let Some(head) = waiting.first() {
            prop_assert!(
                !admissible(&live, &head.1, head.2),
                "head waiter {:?} grantable but left waiting beside {:?}",
                head,
                live
            );
            // The queue's head is never a waiter that left.
            let first = lock.waiters().next().unwrap();
            prop_assert!(sut.alive(first.id));
        }
        if let Act::Lock {
            owner, mode, wait, ..
        } = act
        {
            let o = name(*owner);
            match reply {
                Reply::Acquire(Ok(Acquire::Granted(t))) => {
                    let hold = lock.hold_of(&o, now).expect("granted means held");
                    prop_assert_eq!(hold.token, *t);
                    let before = decided_on.expect("a grant has an effect");
                    match before.iter().find(|h| h.0 == o) {
                        // A new holder: it may not overtake anyone still waiting.
                        None => {
                            prop_assert!(waiting.is_empty(), "{:?} overtook {:?}", act, waiting)
                        }
                        // An upgrade is granted at once only to the sole holder.
                        Some(h) if *mode == Mode::Write && h.2 == 0 && !sut.key.is_election() => {
                            prop_assert_eq!(before.len(), 1, "upgrade beside {:?}", before)
                        }
                        // Reentrant (or a leader's renewal): may pass the queue.
                        Some(_) => {}
                    }
                }
                Reply::Acquire(Ok(Acquire::Queued)) => {
                    let id = wait.expect("queued only with WAIT");
                    if lock.holders().any(|h| h.owner == o) {
                        seen.upgrades.insert(id);
                    }
                }
                _ => {}
            }
        }
        // The key is empty exactly when nothing is held and nobody waits.
        prop_assert_eq!(lock.is_empty(), live.is_empty() && waiting.is_empty());
        prop_assert_eq!(
            lock.is_empty(),
            lock.holder_count() == 0 && lock.waiter_count() == 0
        );
    }

    if sut.key.is_election() {
        prop_assert!(lock.holder_count() <= 1, "two leaders: {:?}", all);
        prop_assert!(all.iter().all(|h| h.1 == 0 && h.2 == 1));
        if let Key::El(e) = &sut.key {
            let cur = e.current(now).map(|h| (h.owner.to_vec(), h.hold.token));
            if let Some((o, term)) = cur {
                match seen.terms.get(&term) {
                    Some(prev) => prop_assert_eq!(prev, &o, "term {} changed hands", term),
                    None => {
                        prop_assert!(
                            term > seen.max_term,
                            "term {} not above {}",
                            term,
                            seen.max_term
                        );
                        seen.max_term = term;
                        seen.terms.insert(term, o.clone());
                    }
                }
                if let (
                    Act::Lock { owner, ttl, .. },
                    Some((Reply::Acquire(Ok(Acquire::Granted(t))), _)),
                ) = (act, out)
                {
                    prop_assert_eq!(&name(*owner), &o);
                    prop_assert_eq!(*t, term);
                    prop_assert_eq!(
                        e.current(now).unwrap().hold.deadline,
                        now.saturating_add(*ttl)
                    );
                }
            }
        }
    }
    Ok(())
}

fn run_invariants(election: bool, reset: bool, ops: &[Op]) -> TestResult {
    let mut sut = Sut::new(election);
    let mut seen = Seen::default();
    for op in ops {
        let act = sut.resolve(op);
        let out = sut.act(&act);
        check_invariants(&sut, &mut seen, &act, &out)?;
        if act.is_core_op() && reset && sut.reset_if_empty() {
            seen.shadow = Lock::default();
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config(500))]

    #[test]
    fn rwlock_invariants((_owners, reset, ops) in scenario(200)) {
        run_invariants(false, reset, &ops)?;
    }

    #[test]
    fn election_invariants((_owners, reset, ops) in scenario(120)) {
        run_invariants(true, reset, &ops)?;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Replay
// ---------------------------------------------------------------------------------------------

fn run_replay(election: bool, ops: &[Op]) -> TestResult {
    let mut sut = Sut::new(election);
    let mut log: Vec<Effect> = vec![];
    let mut replica = Lock::new();
    let mut replica_tokens = Tokens::new();
    for op in ops {
        let act = sut.resolve(op);
        if let Some((_, changes)) = sut.act(&act) {
            for e in &changes.effects {
                replica.apply(e, &mut replica_tokens);
            }
            log.extend(changes.effects);
        }
        let lock = sut.key.lock();
        prop_assert_eq!(
            real_holders(replica.holders()),
            real_holders(lock.holders()),
            "after {:?}",
            act
        );
        prop_assert_eq!(replica.last_token(), lock.last_token());
        prop_assert_eq!(replica_tokens.high_water(), sut.world.tokens.high_water());
    }
    // And once more from scratch, the whole log at once.
    let mut fresh = Lock::new();
    let mut fresh_tokens = Tokens::new();
    for e in &log {
        fresh.apply(e, &mut fresh_tokens);
    }
    let lock = sut.key.lock();
    prop_assert_eq!(real_holders(fresh.holders()), real_holders(lock.holders()));
    prop_assert_eq!(fresh.last_token(), lock.last_token());
    prop_assert_eq!(fresh_tokens.high_water(), sut.world.tokens.high_water());
    prop_assert_eq!(fresh.next_deadline(), lock.next_deadline());
    prop_assert_eq!(fresh.last_deadline(), lock.last_deadline());
    Ok(())
}

proptest! {
    #![proptest_config(config(300))]

    #[test]
    fn replaying_effects_rebuilds_the_state(election in any::<bool>(), (_owners, _reset, ops) in scenario(200)) {
        run_replay(election, &ops)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Targeted tests
// ---------------------------------------------------------------------------------------------

/// A small driver for hand-written scenarios.
struct Hand {
    sut: Sut,
}

impl Hand {
    fn new() -> Hand {
        Hand {
            sut: Sut::new(false),
        }
    }

    fn lock(
        &mut self,
        owner: usize,
        mode: Mode,
        ttl: u64,
        wait: bool,
    ) -> Result<Acquire, LockError> {
        let op = Op::Lock {
            owner,
            write: mode == Mode::Write,
            ttl,
            wait,
        };
        let act = self.sut.resolve(&op);
        match self.sut.act(&act) {
            Some((Reply::Acquire(r), _)) => r,
            other => panic!("{other:?}"),
        }
    }

    fn woken(&mut self, act: Act) -> Vec<u64> {
        match self.sut.act(&act) {
            Some((_, c)) => c.woken.iter().map(|w| w.waiter).collect(),
            None => vec![],
        }
    }
}

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;
const W: usize = 3;

/// A key's own last token (say from an RDB file) bounds new tokens even when the token source
/// has not seen it.
#[test]
fn a_keys_last_token_bounds_new_tokens() {
    let mut l = RwLock::default();
    l.0.observe_token(5_000_000_000_000_000);
    let mut world = World::at(START);
    let (_, r) = l.lock(&request(b"a", Mode::Write, 10, None, 10), &mut world.env());
    assert_eq!(r, Ok(Acquire::Granted(5_000_000_000_000_001)));
}

/// At the top of the token range no token is issued and the grant is refused: never a panic (a
/// panic in a module kills Redis) and never a wrapped token (which would break fencing). The
/// top is reached with a clock at or past u64::MAX / 1000 ms, or with a token u64::MAX observed
/// from an RDB file, the AOF or a replication stream.
#[test]
fn tokens_do_not_overflow_at_the_top_of_the_range() {
    // By the clock: the ceiling is i64::MAX (tokens are RESP integers); past it, no token.
    let mut tokens = Tokens::new();
    assert_eq!(tokens.issue(0, u64::MAX / 1000 + 1), None);
    tokens.observe(Tokens::MAX - 1);
    let first = tokens.issue(0, START).unwrap();
    let next = std::panic::catch_unwind(move || tokens.issue(0, START));
    assert!(
        matches!(next, Ok(None)),
        "no second token after the ceiling {first}: {next:?}"
    );
    // By a replicated grant, then an ordinary request at an ordinary time.
    let result = std::panic::catch_unwind(|| {
        let mut l = RwLock::default();
        let mut world = World::at(START);
        let grant = Effect::Grant {
            owner: b"a".to_vec().into(),
            mode: Mode::Read,
            deadline: START + 10,
            token: u64::MAX,
        };
        l.0.apply(&grant, &mut world.tokens);
        l.lock(&request(b"b", Mode::Read, 10, None, 10), &mut world.env())
            .1
    });
    // There is no token above u64::MAX: the only correct answer is to refuse the grant.
    assert!(
        !matches!(result, Ok(Ok(Acquire::Granted(_))) | Err(_)),
        "grant after token u64::MAX: {result:?}"
    );
}

/// While a reader waits to upgrade, a second reader that *waits* to upgrade gets the DEADLOCK
/// error; one that asks without WAIT is answered at once, and not granted: nil.
#[test]
fn a_second_upgrade_without_wait_is_refused_with_nil() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(A, Mode::Read, 100, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(B, Mode::Read, 100, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(A, Mode::Write, 100, true), Ok(Acquire::Queued));
    // With WAIT: the error.
    assert_eq!(
        h.lock(B, Mode::Write, 100, true),
        Err(LockError::UpgradeDeadlock)
    );
    // Without WAIT: not granted, answered at once: nil.
    assert_eq!(h.lock(B, Mode::Write, 100, false), Ok(Acquire::Busy));
}

/// A write request queued before its owner became a reader (the same owner id on two
/// connections) counts as a waiting upgrade: a second reader's upgrade gets the DEADLOCK error
/// instead of both waiting for each other until a lease lapses.
#[test]
fn an_upgrade_beside_a_reader_already_waiting_for_write_is_refused() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(W, Mode::Write, 100, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(A, Mode::Read, 1_000, true), Ok(Acquire::Queued)); // id 1
    assert_eq!(h.lock(B, Mode::Read, 1_000, true), Ok(Acquire::Queued)); // id 2
    assert_eq!(h.lock(A, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 3
    assert_eq!(h.woken(Act::Unlock { owner: W }), vec![1, 2]);
    // A and B both read; A waits for the write lock (id 3). If B waited to upgrade as well,
    // each would wait for the other to leave.
    let b = h.lock(B, Mode::Write, 1_000, true);
    let stuck = h.woken(Act::Advance(999)).is_empty() && h.woken(Act::Tick).is_empty();
    assert_eq!(
        b,
        Err(LockError::UpgradeDeadlock),
        "stuck until the leases lapse: {stuck}"
    );
}

/// A reader waiting to upgrade whose read hold lapsed is an ordinary waiter: another reader may
/// then wait to upgrade (no deadlock is possible).
#[test]
fn an_upgrade_whose_read_hold_lapsed_is_an_ordinary_waiter() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(A, Mode::Read, 10, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(B, Mode::Read, 1_000, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(C, Mode::Read, 1_000, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(W, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 1
    assert_eq!(h.lock(A, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 2, upgrade
                                                                          // A's read hold lapses while its upgrade waits.
    assert!(h.woken(Act::Advance(10)).is_empty());
    assert!(h.woken(Act::Tick).is_empty());
    assert!(h
        .sut
        .key
        .lock()
        .hold_of(&name(A), h.sut.world.now)
        .is_none());
    // B may wait to upgrade: A is no longer a reader.
    assert_eq!(h.lock(B, Mode::Write, 1_000, true), Ok(Acquire::Queued));
}

/// A waiting upgrade whose read hold lapsed is served in arrival order, not ahead of a writer
/// that queued before it.
#[test]
fn a_lapsed_upgrader_does_not_overtake_earlier_waiters() {
    let mut h = Hand::new();
    assert!(matches!(
        h.lock(A, Mode::Read, 10, false),
        Ok(Acquire::Granted(_))
    ));
    assert!(matches!(
        h.lock(B, Mode::Read, 1_000, false),
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(h.lock(W, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 1
    assert_eq!(h.lock(A, Mode::Write, 1_000, true), Ok(Acquire::Queued)); // id 2, upgrade
    assert!(h.woken(Act::Advance(10)).is_empty());
    assert!(h.woken(Act::Tick).is_empty());
    // B leaves: W (id 1) arrived before A's request (id 2), and A holds nothing any more.
    assert_eq!(h.woken(Act::Unlock { owner: B }), vec![1]);
}

/// A waiter whose client left still counts against `max_waiters` (and in `waiter_count()`,
/// INFO's `waiters`) until the shell cancels it, which the module does within one event-loop
/// turn of the disconnect; once cancelled it no longer counts.
#[test]
fn waiters_that_left_count_against_the_limit_until_cancelled() {
    let mut world = World::at(START);
    let mut l = RwLock::default();
    let req = |owner: &'static [u8], wait| request(owner, Mode::Write, 100, wait, 2);
    assert!(matches!(
        l.lock(&req(b"h", None), &mut world.env()).1,
        Ok(Acquire::Granted(_))
    ));
    assert_eq!(
        l.lock(&req(b"a", Some(1)), &mut world.env()).1,
        Ok(Acquire::Queued)
    );
    assert_eq!(
        l.lock(&req(b"b", Some(2)), &mut world.env()).1,
        Ok(Acquire::Queued)
    );
    world.leave(2);
    // Not cancelled yet: both places are taken.
    assert_eq!(
        l.lock(&req(b"c", Some(3)), &mut world.env()).1,
        Err(LockError::TooManyWaiters(2))
    );
    assert_eq!(l.0.waiter_count(), 2);
    // The shell cancels it: one live waiter, so a second one fits.
    assert!(l.cancel(2, &mut world.env()).1);
    assert_eq!(l.0.waiter_count(), 1);
    assert_eq!(
        l.lock(&req(b"c", Some(3)), &mut world.env()).1,
        Ok(Acquire::Queued)
    );
}
