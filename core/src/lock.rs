use crate::effect::{Changes, DropReason, Effect, Ended, Woken};
use crate::env::Env;
use crate::holders::{Hold, HolderView, Holders};
use crate::id::{AsId, Id};
use crate::queue::{Queue, Waiter};
use crate::{Mode, Ms, Tokens};

/// What a key is. The three share one state machine (holders with their own leases, a wait
/// queue, tokens); they differ in who may hold at once and in what a holder's repeated
/// request means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Readers share, a writer excludes; a repeated request is a reentrant hold.
    RwLock,
    /// One leader; campaigning again renews its lease.
    Election,
    /// At most `limit` permits held at once; one hold per owner.
    Semaphore,
}

/// How a request waits when it cannot be granted at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wait {
    /// The waiter id the shell chose (increasing with arrival).
    pub id: u64,
    /// When the wait ends without a grant, on the monotonic clock ([`crate::Mono`]); `None`
    /// waits without a limit.
    pub until: Option<Ms>,
}

impl Wait {
    /// A wait without a time limit.
    pub fn forever(id: u64) -> Wait {
        Wait { id, until: None }
    }
}

/// A request for a hold.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    pub owner: &'a Id,
    pub mode: Mode,
    /// Lease length in ms, from the moment of the grant.
    pub ttl: u64,
    /// Park the request if it cannot be granted now.
    pub wait: Option<Wait>,
    /// The most waiters this key may have.
    pub max_waiters: usize,
    /// The most ms the hold may last from its first grant, renewals included (0: no cap).
    pub max_hold: u64,
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
    /// The request would close a cycle in the server's wait-for graph (see `waitfor`).
    Deadlock,
    /// The key's queue is full.
    TooManyWaiters(usize),
    /// No token above the highest one seen can be issued (see [`Tokens::MAX`]).
    TokensExhausted,
    /// A semaphore request names another limit than the key's.
    LimitMismatch { limit: u32 },
    /// A semaphore holder asked again with another number of permits.
    PermitsMismatch { permits: u32 },
    /// The lease would pass the hold's cap (its first grant + its max hold), or the ttl asked
    /// is longer than the max hold: `left` ms remain until the cap.
    MaxHold { left: u64 },
}

/// Whether a grant keeps the owner's existing token (a reentrant hold or a downgrade) or
/// needs a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    Keep(u64),
    New,
}

/// What a give-back returns: one hold (the write hold first), or all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GiveBack {
    One,
    All,
}

pub(crate) struct Op<'e, 'a> {
    pub(crate) env: &'e mut Env<'a>,
    pub(crate) changes: Changes,
}

/// The state of one key.
#[derive(Debug, Default)]
pub struct Lock {
    last_token: u64,
    /// A semaphore's limit (0 for the other kinds, and before a semaphore's first grant).
    pub(crate) limit: u32,
    pub(crate) holders: Holders,
    pub(crate) queue: Option<Box<Queue>>,
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

    /// A semaphore's limit (0: not a semaphore, or not set yet).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// No holder and no waiter: the key should not exist.
    pub fn is_empty(&self) -> bool {
        self.holders.len() == 0 && self.queue.is_none()
    }

    /// How many holders (live or not yet pruned).
    pub fn holder_count(&self) -> usize {
        self.holders.len()
    }

    /// The sum of the holders' read counts: a semaphore's permits in use.
    pub fn permits_used(&self) -> u64 {
        self.holders.total_reads()
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
    pub fn hold_of(&self, owner: impl AsId, now: Ms) -> Option<Hold> {
        let owner = owner.as_id();
        self.holders.get(&owner).filter(|h| h.live(now))
    }

    /// The earliest lease deadline.
    pub fn next_deadline(&self) -> Option<Ms> {
        self.holders.min_deadline()
    }

    /// The latest lease deadline: after it, nothing of this key is held.
    pub fn last_deadline(&self) -> Option<Ms> {
        self.holders.max_deadline()
    }

    /// When (wall-clock ms) the shell must look at this key again: its first lease deadline
    /// or its first wait deadline, whichever comes first. `to_wall` places a wait deadline
    /// (monotonic ms) on the wall clock; it is called only if a waiter has a deadline, so a
    /// key nobody waits for reads no clock here.
    pub fn next_wakeup(&self, to_wall: impl FnOnce(Ms) -> Ms) -> Option<Ms> {
        let until = self
            .queue
            .as_ref()
            .and_then(|q| q.first_until())
            .map(|u| to_wall(u.0));
        match (self.holders.min_deadline(), until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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
        let queue = self.queue.as_ref().map_or(0, |q| q.heap_bytes(&round));
        self.holders.heap_bytes(&round) + queue
    }

    /// Takes every waiter out, in the order they would be served, without granting or
    /// answering them: the shell answers them (their key went away) or parks them elsewhere
    /// (grants are held and nothing is left to hold the key).
    pub fn take_waiters(&mut self) -> Vec<Waiter> {
        self.queue.take().map_or_else(Vec::new, |mut q| q.drain())
    }

    /// Parks a waiter again (after its key came back from a reload, or grants opened again):
    /// by its id, so arrival order is kept. Put back in the order [`Lock::take_waiters`] gave
    /// them, the waiting upgrade (first) gets the upgrade slot again; a write request that a
    /// reader queued before it became one keeps its place. Call `tick` afterwards to serve
    /// who can be served.
    pub fn requeue(&mut self, w: Waiter) {
        let upgrade = self.waiter_count() == 0
            && w.mode == Mode::Write
            && self.holders.get(&w.owner).is_some_and(|h| h.writes == 0);
        self.enqueue(w, upgrade);
    }

    /// Puts a holder back as it was saved (RDB load, RESTORE, AOF rewrite records).
    pub fn restore(&mut self, owner: impl AsId, hold: Hold) {
        self.last_token = self.last_token.max(hold.token);
        self.holders.put(&owner.as_id(), hold);
    }

    /// Sets a semaphore's limit as it was saved.
    pub fn restore_limit(&mut self, limit: u32) {
        self.limit = limit;
    }

    /// Applies one effect. Deterministic: no clock, no queue.
    pub fn apply(&mut self, effect: &Effect, tokens: &mut Tokens) {
        self.apply_seen(effect, tokens);
    }

    /// Applies one effect; a give-back (Release, Drop) answers the hold as it was before, so
    /// that `emit` times an ended hold without looking its holder up again.
    fn apply_seen(&mut self, effect: &Effect, tokens: &mut Tokens) -> Option<Hold> {
        match effect {
            Effect::Grant {
                owner,
                mode,
                deadline,
                token,
            } => {
                let mut h = self.holders.get(owner).unwrap_or(Hold::EMPTY);
                match mode {
                    Mode::Read => h.reads = h.reads.saturating_add(1),
                    Mode::Write => h.writes = h.writes.saturating_add(1),
                }
                h.deadline = *deadline;
                h.token = *token;
                self.put_holder(owner, h, tokens);
            }
            Effect::Take {
                owner,
                permits,
                deadline,
                token,
            } => {
                let h = Hold {
                    reads: *permits,
                    writes: 0,
                    deadline: *deadline,
                    token: *token,
                    cap: self.holders.get(owner).map_or(0, |h| h.cap),
                };
                self.put_holder(owner, h, tokens);
            }
            Effect::Limit { limit } => self.limit = *limit,
            Effect::Release { owner } => {
                let before = self.holders.get(owner)?;
                let mut h = before;
                if self.limit > 0 {
                    h = Hold::EMPTY;
                } else if h.writes > 0 {
                    h.writes -= 1;
                } else {
                    h.reads = h.reads.saturating_sub(1);
                }
                if h.reads == 0 && h.writes == 0 {
                    self.remove_holder(owner);
                } else {
                    self.holders.put(owner, h);
                }
                return Some(before);
            }
            Effect::Drop { owner, .. } => return self.remove_holder(owner),
            Effect::Renew { owner, deadline } => {
                if let Some(mut h) = self.holders.get(owner) {
                    h.deadline = *deadline;
                    self.holders.put(owner, h);
                }
            }
            Effect::Cap { owner, at } => {
                if let Some(mut h) = self.holders.get(owner) {
                    h.cap = *at;
                    self.holders.put(owner, h);
                }
            }
        }
        None
    }

    fn put_holder(&mut self, owner: &Id, h: Hold, tokens: &mut Tokens) {
        let new = self.holders.get(owner).is_none();
        self.holders.put(owner, h);
        self.last_token = self.last_token.max(h.token);
        tokens.observe(h.token);
        if new {
            if let Some(q) = self.queue.as_mut() {
                q.holder_changed(owner, true);
            }
        }
    }

    fn remove_holder(&mut self, owner: &Id) -> Option<Hold> {
        let h = self.holders.remove(owner)?;
        if let Some(q) = self.queue.as_mut() {
            q.holder_changed(owner, false);
        }
        Some(h)
    }

    /// Applies `effect` and records it in `op`, with the hold it ended if it ended one (its
    /// owner's last): how long that was held.
    pub(crate) fn emit(&mut self, op: &mut Op, effect: Effect) {
        if let Some(h) = self.apply_seen(&effect, op.env.tokens) {
            let all = matches!(effect, Effect::Drop { .. }) || self.limit > 0;
            if all || u64::from(h.reads) + u64::from(h.writes) == 1 {
                op.changes.ended.push(Ended {
                    effect: op.changes.effects.len() as u32,
                    held_ms: op.env.now.saturating_sub(Tokens::issued_by(h.token)),
                });
            }
        }
        op.changes.effects.push(effect);
    }

    /// Lets time pass up to `now`, in the order things happened, as a timer that fired on
    /// time would have: at each lease deadline every holder whose lease ends by then lapses
    /// and the key is handed on; a waiter whose wait ends before the key frees up for it
    /// times out. At a tie the lapse goes first, so a waiter still waiting at the moment the
    /// key frees up is served.
    ///
    /// Wait deadlines are on the monotonic clock, lease deadlines on the wall clock: they are
    /// ordered by where the wait's deadline falls on the wall clock now.
    pub(crate) fn step(&mut self, kind: Kind, op: &mut Op) {
        let now = op.env.now;
        loop {
            let lapse = self.holders.min_deadline().filter(|d| *d <= now);
            let mono = &op.env.mono;
            let timeout = self
                .queue
                .as_ref()
                .and_then(|q| q.first_until())
                .filter(|(u, _)| *u <= mono.now());
            match (lapse, timeout) {
                (lapse, Some((until, id)))
                    if lapse.is_none_or(|d| mono.to_wall(until, now) < d) =>
                {
                    if self.ready_at_head(kind, id, op) {
                        // A multi-key request this key was free for by the end of its wait:
                        // reported ready, not timed out here. The shell grants it if every
                        // key was (as a timer on time would have), else a key that was not
                        // ends its wait; later events wait for the next look.
                        break;
                    }
                    if let Some(q) = self.queue.as_mut() {
                        q.cancel(id);
                    }
                    op.changes.timed_out.push(id);
                }
                (Some(at), _) => {
                    while let Some(owner) = self.holders.first_lapsed(at) {
                        let reason = DropReason::Lapse;
                        self.emit(op, Effect::Drop { owner, reason });
                    }
                }
                (None, _) => break,
            }
            self.promote(kind, op);
        }
        self.promote(kind, op);
    }

    /// Whether waiter `id` is a multi-key request at the head of this key's queue that could
    /// be granted here now; if so, reports it ready.
    fn ready_at_head(&self, kind: Kind, id: u64, op: &mut Op) -> bool {
        let Some(head) = self.queue.as_ref().and_then(|q| q.head()) else {
            return false;
        };
        let here = head.id == id
            && head.group
            && op.env.may_grant()
            && self
                .admissible(kind, &head.owner, head.mode, head.permits)
                .is_some();
        if here && !op.changes.ready.contains(&id) {
            op.changes.ready.push(id);
        }
        here
    }

    pub(crate) fn admissible(
        &self,
        kind: Kind,
        owner: &Id,
        mode: Mode,
        permits: u32,
    ) -> Option<Admit> {
        admissible(&self.holders, self.limit, kind, owner, mode, permits)
    }

    /// Grants `w`'s request (already known admissible, or held: reentrant) and returns the
    /// token.
    pub(crate) fn grant(&mut self, kind: Kind, op: &mut Op, w: &Waiter) -> Result<u64, LockError> {
        let deadline = op.env.deadline(w.ttl);
        let held = self.holders.get(&w.owner);
        let admit = self.admissible(kind, &w.owner, w.mode, w.permits);
        // The cap: a holder keeps its first grant's; a new holder's counts from now.
        let cap = match held {
            Some(h) => {
                let extends = match kind {
                    Kind::Election => true,
                    _ => deadline > h.deadline,
                };
                if extends && h.passes_cap(deadline) {
                    let left = op.env.left(h.cap);
                    return Err(LockError::MaxHold { left });
                }
                0
            }
            None if w.max_hold > 0 => {
                if w.ttl > w.max_hold {
                    return Err(LockError::MaxHold { left: w.max_hold });
                }
                op.env.deadline(w.max_hold)
            }
            None => 0,
        };
        let out = self.grant_capped(kind, op, w, held, admit, deadline);
        if cap != 0 && out.is_ok() {
            let owner = w.owner.clone();
            self.emit(op, Effect::Cap { owner, at: cap });
        }
        out
    }

    #[inline]
    fn grant_capped(
        &mut self,
        kind: Kind,
        op: &mut Op,
        w: &Waiter,
        held: Option<Hold>,
        admit: Option<Admit>,
        deadline: Ms,
    ) -> Result<u64, LockError> {
        let now = op.env.now;
        match (kind, held) {
            // A leader campaigning again renews; its term stays.
            (Kind::Election, Some(h)) => {
                let owner = w.owner.clone();
                self.emit(op, Effect::Renew { owner, deadline });
                Ok(h.token)
            }
            // A semaphore holder asking again: its lease lasts at least ttl from now.
            (Kind::Semaphore, Some(h)) => {
                if deadline > h.deadline {
                    let owner = w.owner.clone();
                    self.emit(op, Effect::Renew { owner, deadline });
                }
                Ok(h.token)
            }
            (Kind::Semaphore, None) => {
                let token = self.issue(op.env.tokens, now)?;
                if self.holders.len() == 0 {
                    let limit = self.limit;
                    self.emit(op, Effect::Limit { limit });
                }
                let (owner, permits) = (w.owner.clone(), w.permits);
                let take = Effect::Take {
                    owner,
                    permits,
                    deadline,
                    token,
                };
                self.emit(op, take);
                Ok(token)
            }
            _ => {
                let token = match admit {
                    Some(Admit::Keep(t)) => t,
                    _ => self.issue(op.env.tokens, now)?,
                };
                // A reentrant grant never shortens the owner's lease.
                let deadline = held.map_or(deadline, |h| h.deadline.max(deadline));
                let grant = Effect::Grant {
                    owner: w.owner.clone(),
                    mode: w.mode,
                    deadline,
                    token,
                };
                self.emit(op, grant);
                Ok(token)
            }
        }
    }

    fn issue(&self, tokens: &mut Tokens, now: Ms) -> Result<u64, LockError> {
        tokens
            .issue(self.last_token, now)
            .ok_or(LockError::TokensExhausted)
    }

    /// Serves the head of the queue for as long as it can be granted.
    pub(crate) fn promote(&mut self, kind: Kind, op: &mut Op) {
        loop {
            let holders = &self.holders;
            let Some(q) = self.queue.as_mut() else { return };
            q.skip_dead(op.env.alive);
            if q.upgrade().is_some_and(|u| holders.get(&u.owner).is_none()) {
                q.demote_upgrade();
            }
            let Some(head) = q.head() else {
                self.queue = None;
                return;
            };
            if !op.env.may_grant() {
                return;
            }
            if kind == Kind::Semaphore {
                // The same owner queued twice with other permits: that request cannot be
                // granted (one hold per owner), so its wait ends.
                if holders
                    .get(&head.owner)
                    .is_some_and(|h| h.reads != head.permits)
                {
                    let id = head.id;
                    q.cancel(id);
                    op.changes.timed_out.push(id);
                    continue;
                }
            }
            let (owner, mode, permits) = (&head.owner, head.mode, head.permits);
            if admissible(holders, self.limit, kind, owner, mode, permits).is_none() {
                return;
            }
            if head.group {
                // A multi-key request keeps its place: nobody behind it is served, and the
                // shell grants it with its other keys once they are all ready.
                let id = head.id;
                if !op.changes.ready.contains(&id) {
                    op.changes.ready.push(id);
                }
                return;
            }
            let Some(w) = q.pop_head() else { return };
            match self.grant(kind, op, &w) {
                Ok(token) => op.changes.woken.push(Woken {
                    waiter: w.id,
                    token,
                }),
                Err(LockError::MaxHold { .. }) => {
                    // A holder's queued upgrade that would pass its cap: its wait ends.
                    op.changes.timed_out.push(w.id);
                }
                Err(_) => {
                    // No token left: the waiter goes back in arrival order and will time out.
                    self.enqueue(w, false);
                    return;
                }
            }
        }
    }

    /// Whether another current reader already waits for the write lock: in the upgrade
    /// slot, or as a write request it queued before it became a reader. Two such waits would
    /// each wait for the other's read hold to end. The queue indexes write requests of
    /// current holders, so this looks only at those.
    pub(crate) fn another_upgrade_waits(&self, owner: &Id, alive: &dyn Fn(u64) -> bool) -> bool {
        let Some(q) = self.queue.as_ref() else {
            return false;
        };
        let holds = |o: &Id| self.holders.get(o).is_some();
        if q.upgrade()
            .is_some_and(|u| u.owner != *owner && holds(&u.owner) && alive(u.id))
        {
            return true;
        }
        q.held_writers().filter(|o| *o != owner).any(|o| {
            q.writes_of(o)
                .is_some_and(|ids| ids.iter().any(|id| alive(*id)))
        })
    }

    pub(crate) fn enqueue(&mut self, w: Waiter, upgrade: bool) {
        let holds = self.holders.get(&w.owner).is_some();
        let q = self.queue.get_or_insert_with(Box::default);
        if upgrade && q.upgrade().is_none() {
            q.push_upgrade(w);
        } else {
            q.push(w, holds);
        }
    }

    pub(crate) fn run<T>(
        &mut self,
        env: &mut Env,
        f: impl FnOnce(&mut Lock, &mut Op) -> T,
    ) -> (Changes, T) {
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
        permits: u32,
        env: &mut Env,
    ) -> (Changes, Result<Acquire, LockError>) {
        self.run(env, |lock, op| {
            lock.step(kind, op);
            let w = Waiter {
                id: req.wait.map_or(0, |w| w.id),
                owner: req.owner.clone(),
                mode: req.mode,
                permits,
                ttl: req.ttl,
                until: req.wait.and_then(|w| w.until),
                max_hold: req.max_hold,
                group: false,
            };
            let held = lock.holders.get(req.owner);
            if held.is_none() && req.max_hold > 0 && req.ttl > req.max_hold {
                // Refused before it waits: no grant could give the ttl asked.
                let left = req.max_hold;
                return Err(LockError::MaxHold { left });
            }
            if let (Kind::Semaphore, Some(h)) = (kind, held) {
                if h.reads != permits {
                    let permits = h.reads;
                    return Err(LockError::PermitsMismatch { permits });
                }
            }
            let upgrade = kind == Kind::RwLock
                && matches!(held, Some(h) if req.mode == Mode::Write && h.writes == 0);
            if held.is_some() && !upgrade {
                // Reentrant, a renewal, or a semaphore holder's retry: never queues, and
                // makes no new holder, so it is allowed even while grants are held.
                return lock.grant(kind, op, &w).map(Acquire::Granted);
            }
            let may = op.env.may_grant();
            if upgrade {
                if may && lock.holders.len() == 1 {
                    return lock.grant(kind, op, &w).map(Acquire::Granted);
                }
                if req.wait.is_some() && lock.another_upgrade_waits(req.owner, op.env.alive) {
                    return Err(LockError::UpgradeDeadlock);
                }
            } else {
                let queued = lock.queue.as_mut().is_some_and(|q| {
                    q.skip_dead(op.env.alive);
                    !q.is_empty()
                });
                let admit = lock.admissible(kind, req.owner, req.mode, permits);
                if may && !queued && admit.is_some() {
                    return lock.grant(kind, op, &w).map(Acquire::Granted);
                }
            }
            if req.wait.is_none() {
                return Ok(Acquire::Busy);
            }
            if lock.waiter_count() >= req.max_waiters {
                return Err(LockError::TooManyWaiters(req.max_waiters));
            }
            lock.enqueue(w, upgrade);
            Ok(Acquire::Queued)
        })
    }

    /// Gives back one hold of `owner` (its write hold first), or all; then serves the
    /// waiters. True if it held anything.
    fn give_back(
        &mut self,
        kind: Kind,
        owner: &Id,
        how: GiveBack,
        env: &mut Env,
    ) -> (Changes, bool) {
        self.run(env, |lock, op| {
            lock.step(kind, op);
            if lock.holders.get(owner).is_none() {
                return false;
            }
            let owner = owner.clone();
            let effect = match how {
                GiveBack::All => Effect::Drop {
                    owner,
                    reason: DropReason::Resign,
                },
                GiveBack::One => Effect::Release { owner },
            };
            lock.emit(op, effect);
            lock.promote(kind, op);
            true
        })
    }

    /// Sets `owner`'s lease to end `ttl` from now; its token, or `None` if it holds nothing;
    /// `MaxHold` (and no change) if that passes the hold's cap.
    fn renew(
        &mut self,
        kind: Kind,
        owner: &Id,
        ttl: u64,
        env: &mut Env,
    ) -> (Changes, Result<Option<u64>, LockError>) {
        self.run(env, |lock, op| {
            lock.step(kind, op);
            let Some(h) = lock.holders.get(owner) else {
                return Ok(None);
            };
            let deadline = op.env.deadline(ttl);
            if h.passes_cap(deadline) {
                let left = op.env.left(h.cap);
                return Err(LockError::MaxHold { left });
            }
            let owner = owner.clone();
            lock.emit(op, Effect::Renew { owner, deadline });
            Ok(Some(h.token))
        })
    }

    /// Prunes lapsed holders, ends waits that ran out, and serves waiters (a timer fired, or
    /// grants opened again).
    fn tick(&mut self, kind: Kind, env: &mut Env) -> Changes {
        self.run(env, |lock, op| lock.step(kind, op)).0
    }

    /// Takes in the waiters of `from` (see [`Keyed::merge`]), then serves who can be served.
    fn merge(&mut self, kind: Kind, mut from: Lock, env: &mut Env) -> Changes {
        self.run(env, |lock, op| {
            // A semaphore of another limit cannot take them: their requests name another one.
            let other_limit = kind == Kind::Semaphore
                && from.limit != 0
                && lock.limit != 0
                && from.limit != lock.limit;
            if lock.is_empty() && kind == Kind::Semaphore && lock.limit == 0 {
                lock.limit = from.limit;
            }
            lock.observe_token(from.last_token);
            for w in from.take_waiters() {
                if !(op.env.alive)(w.id) {
                    continue;
                }
                if other_limit {
                    op.changes.timed_out.push(w.id);
                } else {
                    lock.requeue(w);
                }
            }
            lock.step(kind, op);
        })
        .0
    }

    /// Takes waiter `id` out of the queue (it left), then serves who can now be served; true
    /// if it was queued here. A cancelled waiter is in neither `woken` nor `timed_out`.
    fn cancel(&mut self, kind: Kind, id: u64, env: &mut Env) -> (Changes, bool) {
        self.run(env, |lock, op| {
            let found = lock.queue.as_mut().and_then(|q| q.cancel(id)).is_some();
            lock.step(kind, op);
            found
        })
    }
}

/// Whether `owner` may take `mode` (or `permits`) now, ignoring the queue.
pub(crate) fn admissible(
    holders: &Holders,
    limit: u32,
    kind: Kind,
    owner: &Id,
    mode: Mode,
    permits: u32,
) -> Option<Admit> {
    let held = holders.get(owner);
    if kind == Kind::Semaphore {
        let fits = holders.total_reads() + u64::from(permits) <= u64::from(limit);
        return match held {
            Some(h) => Some(Admit::Keep(h.token)),
            None => fits.then_some(Admit::New),
        };
    }
    match (mode, held) {
        (Mode::Read, Some(h)) => Some(Admit::Keep(h.token)),
        (Mode::Write, Some(h)) if h.writes > 0 => Some(Admit::Keep(h.token)),
        (Mode::Write, Some(_)) => (holders.len() == 1).then_some(Admit::New),
        (Mode::Read, None) => (!holders.has_writer()).then_some(Admit::New),
        (Mode::Write, None) => (holders.len() == 0).then_some(Admit::New),
    }
}

/// The operations every kind of key has, whatever its rules: what the shell's timer, its
/// waiter bookkeeping and its replication need.
pub trait Keyed: Default {
    const KIND: Kind;
    fn lock(&self) -> &Lock;
    fn lock_mut(&mut self) -> &mut Lock;

    /// Prunes lapsed holders, ends waits that ran out, and serves waiters.
    fn tick(&mut self, env: &mut Env) -> Changes {
        self.lock_mut().tick(Self::KIND, env)
    }

    /// Takes waiter `id` out (it left) and serves who can now be served.
    fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        self.lock_mut().cancel(Self::KIND, id, env)
    }

    /// Takes in the waiters of `from`: the same name's requests parked while grants were held
    /// back and no key held them (the lobby), when a key arrives at the name (RESTORE, RENAME,
    /// COPY, MOVE) or grants open on it. They keep their arrival order and are served by this
    /// key's rules; a waiter this key cannot take (a semaphore of another limit) has its wait
    /// ended, and one whose client left is dropped.
    fn merge(&mut self, from: Lock, env: &mut Env) -> Changes {
        self.lock_mut().merge(Self::KIND, from, env)
    }
}

/// A read-write lock key.
#[derive(Debug, Default)]
pub struct RwLock(pub Lock);

impl Keyed for RwLock {
    const KIND: Kind = Kind::RwLock;
    fn lock(&self) -> &Lock {
        &self.0
    }
    fn lock_mut(&mut self) -> &mut Lock {
        &mut self.0
    }
}

impl RwLock {
    /// `RWLOCK.RLOCK` / `RWLOCK.WLOCK`.
    pub fn lock(&mut self, req: &Request, env: &mut Env) -> (Changes, Result<Acquire, LockError>) {
        self.0.acquire(Kind::RwLock, req, 1, env)
    }

    /// `RWLOCK.UNLOCK`: one hold of `owner` (its write hold first).
    pub fn unlock(&mut self, owner: impl AsId, env: &mut Env) -> (Changes, bool) {
        self.0
            .give_back(Kind::RwLock, &owner.as_id(), GiveBack::One, env)
    }

    /// `RWLOCK.RENEW`.
    pub fn renew(&mut self, owner: impl AsId, ttl: u64, env: &mut Env) -> (Changes, Option<u64>) {
        let (c, r) = self.try_renew(owner, ttl, env);
        (c, r.unwrap_or(None))
    }

    /// The renewal, with its refusal at the hold's cap (`MaxHold`, nothing changed).
    pub fn try_renew(
        &mut self,
        owner: impl AsId,
        ttl: u64,
        env: &mut Env,
    ) -> (Changes, Result<Option<u64>, LockError>) {
        self.0.renew(Kind::RwLock, &owner.as_id(), ttl, env)
    }

    pub fn tick(&mut self, env: &mut Env) -> Changes {
        Keyed::tick(self, env)
    }

    pub fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        Keyed::cancel(self, id, env)
    }
}

/// An election key: at most one leader (a write holder), whose term is its token.
#[derive(Debug, Default)]
pub struct Election(pub Lock);

impl Keyed for Election {
    const KIND: Kind = Kind::Election;
    fn lock(&self) -> &Lock {
        &self.0
    }
    fn lock_mut(&mut self) -> &mut Lock {
        &mut self.0
    }
}

impl Election {
    /// `LEADER.CAMPAIGN`: the leader's renewal, or a bid for leadership.
    pub fn campaign(
        &mut self,
        candidate: impl AsId,
        ttl: u64,
        wait: Option<Wait>,
        max_waiters: usize,
        env: &mut Env,
    ) -> (Changes, Result<Acquire, LockError>) {
        self.campaign_capped(candidate, ttl, wait, max_waiters, 0, env)
    }

    /// `LEADER.CAMPAIGN ... MAXHOLD ms`: a leadership that may last `max_hold` ms at most.
    pub fn campaign_capped(
        &mut self,
        candidate: impl AsId,
        ttl: u64,
        wait: Option<Wait>,
        max_waiters: usize,
        max_hold: u64,
        env: &mut Env,
    ) -> (Changes, Result<Acquire, LockError>) {
        let req = Request {
            owner: &candidate.as_id(),
            mode: Mode::Write,
            ttl,
            wait,
            max_waiters,
            max_hold,
        };
        self.0.acquire(Kind::Election, &req, 1, env)
    }

    /// `LEADER.RENEW`.
    pub fn renew(
        &mut self,
        candidate: impl AsId,
        ttl: u64,
        env: &mut Env,
    ) -> (Changes, Option<u64>) {
        let (c, r) = self.try_renew(candidate, ttl, env);
        (c, r.unwrap_or(None))
    }

    /// The renewal, with its refusal at the hold's cap (`MaxHold`, nothing changed).
    pub fn try_renew(
        &mut self,
        candidate: impl AsId,
        ttl: u64,
        env: &mut Env,
    ) -> (Changes, Result<Option<u64>, LockError>) {
        self.0.renew(Kind::Election, &candidate.as_id(), ttl, env)
    }

    /// `LEADER.RESIGN`.
    pub fn resign(&mut self, candidate: impl AsId, env: &mut Env) -> (Changes, bool) {
        self.0
            .give_back(Kind::Election, &candidate.as_id(), GiveBack::All, env)
    }

    /// `LEADER.CURRENT`: the leader, its term and its deadline, if one leads at `now`.
    pub fn current(&self, now: Ms) -> Option<HolderView<'_>> {
        self.0.live_holders(now).next()
    }

    pub fn tick(&mut self, env: &mut Env) -> Changes {
        Keyed::tick(self, env)
    }

    pub fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        Keyed::cancel(self, id, env)
    }
}

/// A request for semaphore permits.
#[derive(Clone, Copy, Debug)]
pub struct Permits<'a> {
    pub owner: &'a Id,
    /// The key's limit as the request names it (the key takes it when it is created).
    pub limit: u32,
    /// How many permits this hold takes: 1 to `limit`.
    pub permits: u32,
    pub ttl: u64,
    pub wait: Option<Wait>,
    pub max_waiters: usize,
    pub max_hold: u64,
}

/// A counting semaphore key: at most `limit` permits held at once, each holder with its own
/// lease and token, waiters served strictly in arrival order (a large request at the head is
/// never overtaken, so it never starves).
#[derive(Debug, Default)]
pub struct Semaphore(pub Lock);

impl Keyed for Semaphore {
    const KIND: Kind = Kind::Semaphore;
    fn lock(&self) -> &Lock {
        &self.0
    }
    fn lock_mut(&mut self) -> &mut Lock {
        &mut self.0
    }
}

impl Semaphore {
    /// `SEMAPHORE.ACQUIRE`. A holder asking again with the same permits gets its token back
    /// and its lease lasts at least ttl from now (so a retry after a lost reply is exact).
    pub fn acquire(
        &mut self,
        req: &Permits,
        env: &mut Env,
    ) -> (Changes, Result<Acquire, LockError>) {
        let lock = &mut self.0;
        // Time passes first: a key whose holders all lapsed takes the request's limit, as it
        // would have if the timer had already removed it.
        let mut changes = lock.tick(Kind::Semaphore, env);
        if lock.limit == 0 || lock.is_empty() {
            lock.limit = req.limit;
        } else if lock.limit != req.limit {
            let limit = lock.limit;
            return (changes, Err(LockError::LimitMismatch { limit }));
        }
        let r = Request {
            owner: req.owner,
            mode: Mode::Read,
            ttl: req.ttl,
            wait: req.wait,
            max_waiters: req.max_waiters,
            max_hold: req.max_hold,
        };
        let (more, out) = lock.acquire(Kind::Semaphore, &r, req.permits, env);
        changes.append(more);
        (changes, out)
    }

    /// `SEMAPHORE.RELEASE`: all of `owner`'s permits.
    pub fn release(&mut self, owner: impl AsId, env: &mut Env) -> (Changes, bool) {
        self.0
            .give_back(Kind::Semaphore, &owner.as_id(), GiveBack::One, env)
    }

    /// `SEMAPHORE.RENEW`.
    pub fn renew(&mut self, owner: impl AsId, ttl: u64, env: &mut Env) -> (Changes, Option<u64>) {
        let (c, r) = self.try_renew(owner, ttl, env);
        (c, r.unwrap_or(None))
    }

    /// The renewal, with its refusal at the hold's cap (`MaxHold`, nothing changed).
    pub fn try_renew(
        &mut self,
        owner: impl AsId,
        ttl: u64,
        env: &mut Env,
    ) -> (Changes, Result<Option<u64>, LockError>) {
        self.0.renew(Kind::Semaphore, &owner.as_id(), ttl, env)
    }

    pub fn tick(&mut self, env: &mut Env) -> Changes {
        Keyed::tick(self, env)
    }

    pub fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        Keyed::cancel(self, id, env)
    }
}
