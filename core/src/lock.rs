use crate::effect::{Changes, DropReason, Effect, Woken};
use crate::holders::{Hold, HolderView, Holders};
use crate::queue::{Queue, Waiter};
use crate::{Mode, Ms, Tokens};

/// What a key is: a read-write lock or an election. The two share one state machine; they
/// differ in what a holder's repeated request means (a reentrant hold, or a renewal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    RwLock,
    Election,
}

/// A request for a hold.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub owner: &'a [u8],
    pub mode: Mode,
    /// Lease length in ms, from the moment of the grant.
    pub ttl: u64,
    /// `Some(id)`: park the request under this waiter id if it cannot be granted now.
    pub wait: Option<u64>,
    /// The most waiters this key may have.
    pub max_waiters: usize,
}

/// The answer to a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acquire {
    /// Granted now, with this token.
    Granted(u64),
    /// Not granted, and not waiting.
    Busy,
    /// Parked in the queue under the request's waiter id.
    Queued,
}

/// Requests the rules refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockError {
    /// Another reader of this key already waits to upgrade: both would wait forever.
    UpgradeDeadlock,
    /// The key's queue is full.
    TooManyWaiters(usize),
    /// No token above the highest one seen can be issued (see [`Tokens::MAX`]).
    TokensExhausted,
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::UpgradeDeadlock => f.write_str(
                "DEADLOCK another reader of this key already waits to upgrade to the write lock",
            ),
            LockError::TooManyWaiters(n) => {
                write!(
                    f,
                    "ERR too many waiters on this key (lease.max-waiters is {n})"
                )
            }
            LockError::TokensExhausted => f.write_str(
                "ERR no fencing token above the highest one seen can be issued (2^63-1 reached)",
            ),
        }
    }
}

/// The surroundings of one operation: the time, the token source, and which waiter ids still
/// belong to a connected client (a waiter that is gone is skipped, never granted).
pub struct Env<'a> {
    /// The time, in whole ms (rounded down): leases lapse when it reaches their deadline.
    pub now: Ms,
    /// The clock is a fraction of a ms past `now`: new deadlines round up, so a lease never
    /// lasts less than its ttl.
    pub round_up: bool,
    pub tokens: &'a mut Tokens,
    pub alive: &'a dyn Fn(u64) -> bool,
}

impl Env<'_> {
    /// When a lease of `ttl` granted now ends.
    pub fn deadline(&self, ttl: u64) -> Ms {
        self.now
            .saturating_add(ttl)
            .saturating_add(u64::from(self.round_up))
    }
}

struct Op<'e, 'a> {
    env: &'e mut Env<'a>,
    changes: Changes,
}

/// The state of one key.
#[derive(Debug, Default)]
pub struct Lock {
    last_token: u64,
    /// The earliest time the shell has asked to be woken for this key (0: none). The core
    /// never reads it; it lives here so the key needs no other allocation.
    pub wakeup: Ms,
    holders: Holders,
    queue: Option<Box<Queue>>,
}

impl Lock {
    pub fn new() -> Lock {
        Lock::default()
    }

    /// The last token this key handed out.
    pub fn last_token(&self) -> u64 {
        self.last_token
    }

    /// Raises the key's last token (from an RDB file).
    pub fn observe_token(&mut self, token: u64) {
        self.last_token = self.last_token.max(token);
    }

    /// No holder and no waiter: the key should not exist.
    pub fn is_empty(&self) -> bool {
        self.holders.len() == 0 && self.queue.is_none()
    }

    /// How many holders (live or not yet pruned).
    pub fn holder_count(&self) -> usize {
        self.holders.len()
    }

    /// How many requests wait.
    pub fn waiter_count(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.len())
    }

    /// The waiters, the one waiting to upgrade first, then in arrival order.
    pub fn waiters(&self) -> impl Iterator<Item = &Waiter> {
        self.queue.iter().flat_map(|q| q.iter())
    }

    /// Every holder, including ones whose lease passed but that were not pruned yet.
    pub fn holders(&self) -> impl Iterator<Item = HolderView<'_>> {
        self.holders.iter()
    }

    /// The holders whose lease is still running at `now`.
    pub fn live_holders(&self, now: Ms) -> impl Iterator<Item = HolderView<'_>> {
        self.holders.iter().filter(move |h| h.hold.live(now))
    }

    /// `owner`'s hold, if it is live at `now`.
    pub fn hold_of(&self, owner: &[u8], now: Ms) -> Option<Hold> {
        self.holders.get(owner).copied().filter(|h| h.live(now))
    }

    /// The earliest lease deadline: when the shell must look at this key again.
    pub fn next_deadline(&self) -> Option<Ms> {
        self.holders.min_deadline()
    }

    /// The latest lease deadline: after it, nothing of this key is held.
    pub fn last_deadline(&self) -> Option<Ms> {
        self.holders.max_deadline()
    }

    /// The mode of the key at `now`: `None` when nothing live is held.
    pub fn mode(&self, now: Ms) -> Option<Mode> {
        let mut mode = None;
        for h in self.live_holders(now) {
            if h.hold.writes > 0 {
                return Some(Mode::Write);
            }
            mode = Some(Mode::Read);
        }
        mode
    }

    /// Heap bytes owned by this key besides the `Lock` itself, each allocation rounded up by
    /// `round` (the allocator's size classes); an estimate for large keys.
    pub fn heap_bytes_rounded(&self, round: impl Fn(usize) -> usize) -> usize {
        let queue = self.queue.as_ref().map_or(0, |q| {
            round(std::mem::size_of::<Queue>())
                + q.iter()
                    .map(|w| std::mem::size_of::<Waiter>() + 16 + round(w.owner.len()))
                    .sum::<usize>()
        });
        self.holders.heap_bytes(&round) + queue
    }

    /// Empties the queue without granting anyone: the shell already answered these waiters
    /// (their key was renamed or moved away from under them).
    pub fn forget_waiters(&mut self) {
        self.queue = None;
    }

    /// Puts a holder back as it was saved (RDB load, RESTORE).
    pub fn restore(&mut self, owner: &[u8], hold: Hold) {
        self.last_token = self.last_token.max(hold.token);
        self.holders.put(owner, hold);
    }

    /// Applies one effect. Deterministic: no clock, no queue.
    pub fn apply(&mut self, effect: &Effect, tokens: &mut Tokens) {
        match effect {
            Effect::Grant {
                owner,
                mode,
                deadline,
                token,
            } => {
                let mut h = self.holders.get(owner).copied().unwrap_or(Hold {
                    reads: 0,
                    writes: 0,
                    deadline: 0,
                    token: 0,
                });
                match mode {
                    Mode::Read => h.reads = h.reads.saturating_add(1),
                    Mode::Write => h.writes = h.writes.saturating_add(1),
                }
                h.deadline = *deadline;
                h.token = *token;
                self.holders.put(owner, h);
                self.last_token = self.last_token.max(*token);
                tokens.observe(*token);
            }
            Effect::Release { owner } => {
                if let Some(mut h) = self.holders.get(owner).copied() {
                    if h.writes > 0 {
                        h.writes -= 1;
                    } else {
                        h.reads = h.reads.saturating_sub(1);
                    }
                    if h.reads == 0 && h.writes == 0 {
                        self.holders.remove(owner);
                    } else {
                        self.holders.put(owner, h);
                    }
                }
            }
            Effect::Drop { owner, .. } => {
                self.holders.remove(owner);
            }
            Effect::Renew { owner, deadline } => {
                if let Some(mut h) = self.holders.get(owner).copied() {
                    h.deadline = *deadline;
                    self.holders.put(owner, h);
                }
            }
        }
    }

    fn emit(&mut self, op: &mut Op, effect: Effect) {
        self.apply(&effect, op.env.tokens);
        op.changes.effects.push(effect);
    }

    /// Prunes lapsed holders, then serves waiters that can now be granted.
    fn step(&mut self, kind: Kind, op: &mut Op) {
        let now = op.env.now;
        while let Some(owner) = self.holders.first_lapsed(now) {
            self.emit(
                op,
                Effect::Drop {
                    owner,
                    reason: DropReason::Lapse,
                },
            );
        }
        self.promote(kind, op);
    }

    fn admissible(&self, owner: &[u8], mode: Mode) -> Option<Option<u64>> {
        admissible(&self.holders, owner, mode)
    }

    /// Grants `owner` `mode` (already known admissible) and returns the token.
    fn grant(
        &mut self,
        kind: Kind,
        op: &mut Op,
        owner: &[u8],
        mode: Mode,
        ttl: u64,
    ) -> Result<u64, LockError> {
        let now = op.env.now;
        let deadline = op.env.deadline(ttl);
        let held = self.holders.get(owner).copied();
        match (kind, held) {
            // A leader campaigning again renews; its term stays.
            (Kind::Election, Some(h)) => {
                self.emit(
                    op,
                    Effect::Renew {
                        owner: owner.into(),
                        deadline,
                    },
                );
                Ok(h.token)
            }
            _ => {
                let token = match self.admissible(owner, mode) {
                    Some(Some(existing)) => existing,
                    _ => op
                        .env
                        .tokens
                        .issue(self.last_token, now)
                        .ok_or(LockError::TokensExhausted)?,
                };
                // A reentrant grant never shortens the owner's lease.
                let deadline = held.map_or(deadline, |h| h.deadline.max(deadline));
                self.emit(
                    op,
                    Effect::Grant {
                        owner: owner.into(),
                        mode,
                        deadline,
                        token,
                    },
                );
                Ok(token)
            }
        }
    }

    /// Serves the head of the queue for as long as it can be granted.
    fn promote(&mut self, kind: Kind, op: &mut Op) {
        loop {
            let Some(q) = self.queue.as_mut() else { return };
            q.skip_dead(op.env.alive);
            if q.upgrade
                .as_ref()
                .is_some_and(|u| self.holders.get(&u.owner).is_none())
            {
                q.demote_upgrade();
            }
            let head = q.upgrade.as_ref().or_else(|| q.fifo.values().next());
            let Some(head) = head else {
                self.queue = None;
                return;
            };
            if admissible(&self.holders, &head.owner, head.mode).is_none() {
                return;
            }
            let Some(w) = q
                .upgrade
                .take()
                .or_else(|| q.fifo.pop_first().map(|(_, w)| w))
            else {
                return;
            };
            let Ok(token) = self.grant(kind, op, &w.owner, w.mode, w.ttl) else {
                // No token left: the waiter goes back in arrival order and will time out.
                self.queue_mut().fifo.insert(w.id, w);
                return;
            };
            op.changes.woken.push(Woken {
                waiter: w.id,
                token,
            });
        }
    }

    /// Whether another current reader already waits for the write lock: as the upgrade
    /// slot, or as a write request it queued before it became a reader. Two such waits would
    /// each wait for the other's read hold to end. (Scans the queue; only an upgrade that must
    /// wait beside other readers gets here.)
    fn another_upgrade_waits(&mut self, owner: &[u8], op: &mut Op) -> bool {
        let Some(q) = self.queue.as_mut() else {
            return false;
        };
        q.skip_dead(op.env.alive);
        let holders = &self.holders;
        let alive = op.env.alive;
        let upgrading = |w: &Waiter| {
            w.mode == Mode::Write
                && *w.owner != *owner
                && holders.get(&w.owner).is_some()
                && alive(w.id)
        };
        q.iter().any(upgrading)
    }

    fn queue_mut(&mut self) -> &mut Queue {
        self.queue.get_or_insert_with(Box::default)
    }

    fn run<T>(&mut self, env: &mut Env, f: impl FnOnce(&mut Lock, &mut Op) -> T) -> (Changes, T) {
        let mut op = Op {
            env,
            changes: Changes::default(),
        };
        let out = f(self, &mut op);
        (op.changes, out)
    }

    fn acquire(
        &mut self,
        kind: Kind,
        req: &Request,
        env: &mut Env,
    ) -> (Changes, Result<Acquire, LockError>) {
        self.run(env, |lock, op| {
            lock.step(kind, op);
            let held = lock.holders.get(req.owner).copied();
            let upgrade = matches!(held, Some(h) if req.mode == Mode::Write && h.writes == 0);
            if held.is_some() && !upgrade {
                // Reentrant (or, for an election, a renewal): never queues.
                return lock
                    .grant(kind, op, req.owner, req.mode, req.ttl)
                    .map(Acquire::Granted);
            }
            if upgrade {
                if lock.holders.len() == 1 {
                    return lock
                        .grant(kind, op, req.owner, req.mode, req.ttl)
                        .map(Acquire::Granted);
                }
                if req.wait.is_some() && lock.another_upgrade_waits(req.owner, op) {
                    return Err(LockError::UpgradeDeadlock);
                }
            } else {
                let queued = lock.queue.as_mut().is_some_and(|q| {
                    q.skip_dead(op.env.alive);
                    !q.is_empty()
                });
                if !queued && lock.admissible(req.owner, req.mode).is_some() {
                    return lock
                        .grant(kind, op, req.owner, req.mode, req.ttl)
                        .map(Acquire::Granted);
                }
            }
            let Some(id) = req.wait else {
                return Ok(Acquire::Busy);
            };
            if lock.waiter_count() >= req.max_waiters {
                return Err(LockError::TooManyWaiters(req.max_waiters));
            }
            let waiter = Waiter {
                id,
                owner: req.owner.into(),
                mode: req.mode,
                ttl: req.ttl,
            };
            let q = lock.queue_mut();
            // The upgrade slot holds one waiter; a second upgrade request of the same owner
            // (another connection) waits in arrival order as an ordinary write request.
            if upgrade && q.upgrade.is_none() {
                q.upgrade = Some(waiter);
            } else {
                q.fifo.insert(id, waiter);
            }
            Ok(Acquire::Queued)
        })
    }

    /// Gives back one hold of `owner` (its write hold first), or with `all` every hold; then
    /// serves the waiters. True if it held anything.
    fn give_back(&mut self, kind: Kind, owner: &[u8], all: bool, env: &mut Env) -> (Changes, bool) {
        self.run(env, |lock, op| {
            lock.step(kind, op);
            if lock.holders.get(owner).is_none() {
                return false;
            }
            let owner = owner.into();
            let effect = if all {
                Effect::Drop {
                    owner,
                    reason: DropReason::Resign,
                }
            } else {
                Effect::Release { owner }
            };
            lock.emit(op, effect);
            lock.promote(kind, op);
            true
        })
    }

    /// Sets `owner`'s lease to end `ttl` from now; its token, or `None` if it holds nothing.
    fn renew(
        &mut self,
        kind: Kind,
        owner: &[u8],
        ttl: u64,
        env: &mut Env,
    ) -> (Changes, Option<u64>) {
        self.run(env, |lock, op| {
            lock.step(kind, op);
            let h = lock.holders.get(owner).copied()?;
            let deadline = op.env.deadline(ttl);
            lock.emit(
                op,
                Effect::Renew {
                    owner: owner.into(),
                    deadline,
                },
            );
            Some(h.token)
        })
    }

    /// Prunes lapsed holders and serves waiters (a timer fired).
    fn tick(&mut self, kind: Kind, env: &mut Env) -> Changes {
        self.run(env, |lock, op| lock.step(kind, op)).0
    }

    /// Takes waiter `id` out of the queue (it timed out or left), then serves who can now be
    /// served; true if it was queued here.
    fn cancel(&mut self, kind: Kind, id: u64, env: &mut Env) -> (Changes, bool) {
        self.run(env, |lock, op| {
            let found = lock.queue.as_mut().is_some_and(|q| q.cancel(id));
            lock.step(kind, op);
            found
        })
    }
}

/// Whether `owner` may take `mode` now, ignoring the queue; `Some(Some(token))` when the grant
/// keeps the owner's existing token (reentrant), `Some(None)` when it needs a new one.
fn admissible(holders: &Holders, owner: &[u8], mode: Mode) -> Option<Option<u64>> {
    match (mode, holders.get(owner)) {
        (Mode::Read, Some(h)) => Some(Some(h.token)),
        (Mode::Write, Some(h)) if h.writes > 0 => Some(Some(h.token)),
        (Mode::Write, Some(_)) => (holders.len() == 1).then_some(None),
        (Mode::Read, None) => (!holders.has_writer()).then_some(None),
        (Mode::Write, None) => (holders.len() == 0).then_some(None),
    }
}

/// A read-write lock key.
#[derive(Debug, Default)]
pub struct RwLock(pub Lock);

impl RwLock {
    /// `RWLOCK.RLOCK` / `RWLOCK.WLOCK`.
    pub fn lock(&mut self, req: &Request, env: &mut Env) -> (Changes, Result<Acquire, LockError>) {
        self.0.acquire(Kind::RwLock, req, env)
    }

    /// `RWLOCK.UNLOCK`: one hold of `owner` (its write hold first).
    pub fn unlock(&mut self, owner: &[u8], env: &mut Env) -> (Changes, bool) {
        self.0.give_back(Kind::RwLock, owner, false, env)
    }

    /// `RWLOCK.RENEW`.
    pub fn renew(&mut self, owner: &[u8], ttl: u64, env: &mut Env) -> (Changes, Option<u64>) {
        self.0.renew(Kind::RwLock, owner, ttl, env)
    }

    pub fn tick(&mut self, env: &mut Env) -> Changes {
        self.0.tick(Kind::RwLock, env)
    }

    pub fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        self.0.cancel(Kind::RwLock, id, env)
    }
}

/// An election key: at most one leader (a write holder), whose term is its token.
#[derive(Debug, Default)]
pub struct Election(pub Lock);

impl Election {
    /// `LEADER.CAMPAIGN`: the leader's renewal, or a bid for leadership.
    pub fn campaign(
        &mut self,
        candidate: &[u8],
        ttl: u64,
        wait: Option<u64>,
        max_waiters: usize,
        env: &mut Env,
    ) -> (Changes, Result<Acquire, LockError>) {
        let req = Request {
            owner: candidate,
            mode: Mode::Write,
            ttl,
            wait,
            max_waiters,
        };
        self.0.acquire(Kind::Election, &req, env)
    }

    /// `LEADER.RENEW`.
    pub fn renew(&mut self, candidate: &[u8], ttl: u64, env: &mut Env) -> (Changes, Option<u64>) {
        self.0.renew(Kind::Election, candidate, ttl, env)
    }

    /// `LEADER.RESIGN`.
    pub fn resign(&mut self, candidate: &[u8], env: &mut Env) -> (Changes, bool) {
        self.0.give_back(Kind::Election, candidate, true, env)
    }

    /// `LEADER.CURRENT`: the leader, its term and its deadline, if one leads at `now`.
    pub fn current(&self, now: Ms) -> Option<HolderView<'_>> {
        self.0.live_holders(now).next()
    }

    pub fn tick(&mut self, env: &mut Env) -> Changes {
        self.0.tick(Kind::Election, env)
    }

    pub fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        self.0.cancel(Kind::Election, id, env)
    }
}
