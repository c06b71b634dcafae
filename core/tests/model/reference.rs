//! The reference model: one key as docs/COMMANDS.md describes it, with a `Vec` of holders and
//! a `Vec` of waiters and linear scans. Tokens are 1, 2, 3... in order of issue.
//!
//! Where the contract leaves a choice, the model takes the core's:
//! * an upgrade also keeps the longer of the two leases; a leader's CAMPAIGN sets its lease
//!   exactly like RENEW; a waiting upgrade whose read hold ended goes back to its place in
//!   arrival order; a write request that a current reader queued before it became a reader
//!   counts as a waiting upgrade (for DEADLOCK) but keeps its place; the DEADLOCK error
//!   answers only an upgrade that asked to WAIT;
//! * a waiter whose connection left stays in the queue (it still counts) until it reaches
//!   the head of its line (the upgrade slot or the front of the arrival order), where it is
//!   dropped unanswered, or its wait ends, which is reported;
//! * a semaphore request naming another limit is refused before time passes, so a key whose
//!   holders lapsed but were not pruned yet still refuses it (see the report on this rule);
//! * a semaphore waiter whose owner became a holder meanwhile (two connections, one owner)
//!   is, at the head, a retry with the same permits (the holder's token) or, with other
//!   permits, a wait that ends without a grant;
//! * waiters put back after `take_waiters` (in that order): the first gets the upgrade slot
//!   if it may upgrade; the others keep arrival order.

use std::collections::HashSet;

use redis_lease_core::{Acquire, LockError, Mode, Wait};

use super::ops::{Act, KindSel};
use super::sut::Reply;

#[derive(Clone, Debug)]
pub struct MHolder {
    pub owner: usize,
    /// Read holds; a semaphore holder's permits.
    pub reads: u32,
    pub writes: u32,
    pub deadline: u64,
    pub token: u64,
}

#[derive(Clone, Debug)]
pub struct MWaiter {
    pub id: u64,
    pub owner: usize,
    pub mode: Mode,
    pub permits: u32,
    pub ttl: u64,
    pub until: Option<u64>,
    /// A current reader asking for the write lock: it waits ahead of everyone.
    pub upgrade: bool,
    /// Its connection left; the model was not told either.
    pub gone: bool,
}

/// A rule a run may reach (counted to show the generated runs are not shallow).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    GrantedFromQueue,
    TimedOut,
    /// A wait that ended in the same ms as the lapse that let it in: granted.
    TieGranted,
    /// A wait that ended 1 ms before the lapse that would have let it in.
    Ended1msBefore,
    /// Several events (lapses, ends of waits) decided in one call, in time order.
    LateTick,
    /// A timed-out head let a waiter behind it in.
    TimeoutLetIn,
    QueuedWhileHeld,
    ServedAfterHeld,
    BusyWhileHeld,
    /// A hold that exists was renewed, released or taken again while grants were held.
    KeptWhileHeld,
    Reattached,
    ReattachedUpgrade,
    GoneTimedOut,
    GoneSkipped,
    Deadlock,
    LimitMismatch,
    PermitsMismatch,
    SemRetry,
    /// A semaphore head that does not fit holds back a waiter behind it that would.
    SemHeldBack,
    SemQueuedOtherPermits,
}

impl Rule {
    pub const ALL: [Rule; 20] = [
        Rule::GrantedFromQueue,
        Rule::TimedOut,
        Rule::TieGranted,
        Rule::Ended1msBefore,
        Rule::LateTick,
        Rule::TimeoutLetIn,
        Rule::QueuedWhileHeld,
        Rule::ServedAfterHeld,
        Rule::BusyWhileHeld,
        Rule::KeptWhileHeld,
        Rule::Reattached,
        Rule::ReattachedUpgrade,
        Rule::GoneTimedOut,
        Rule::GoneSkipped,
        Rule::Deadlock,
        Rule::LimitMismatch,
        Rule::PermitsMismatch,
        Rule::SemRetry,
        Rule::SemHeldBack,
        Rule::SemQueuedOtherPermits,
    ];
}

/// How often each rule was reached.
#[derive(Clone, Default)]
pub struct Cov([u64; Rule::ALL.len()]);

impl std::fmt::Debug for Cov {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map()
            .entries(Rule::ALL.iter().map(|r| (r, self.get(*r))))
            .finish()
    }
}

impl Cov {
    pub fn hit(&mut self, r: Rule) {
        self.0[r as usize] += 1;
    }

    pub fn get(&self, r: Rule) -> u64 {
        self.0[r as usize]
    }

    pub fn add(&mut self, o: &Cov) {
        for (a, b) in self.0.iter_mut().zip(o.0) {
            *a += b;
        }
    }
}

/// What an operation answered and whom it decided on: woken (id, token) and timed out.
#[derive(Debug, Default)]
pub struct Out {
    pub woken: Vec<(u64, u64)>,
    pub timed_out: Vec<u64>,
}

#[derive(Debug)]
pub struct Model {
    pub kind: KindSel,
    pub now: u64,
    /// Grants are held (quarantine): no new holder, no new token.
    pub held: bool,
    /// A semaphore's limit (0 before its first request).
    pub limit: u32,
    pub holders: Vec<MHolder>,
    /// In the order they will be served: an upgrade (if any) first, then arrival order.
    pub waiters: Vec<MWaiter>,
    /// Tokens issued so far, over every key (the server-wide source).
    pub issued: u64,
    /// The last token of this key (0 for a fresh key).
    pub key_last: u64,
    pub cov: Cov,
    /// Waiters that queued while grants were held.
    queued_held: HashSet<u64>,
}

impl Model {
    pub fn new(kind: KindSel, now: u64) -> Model {
        Model {
            kind,
            now,
            held: false,
            limit: 0,
            holders: vec![],
            waiters: vec![],
            issued: 0,
            key_last: 0,
            cov: Cov::default(),
            queued_held: HashSet::new(),
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

    /// Permits in use (unpruned holders included).
    pub fn used(&self) -> u64 {
        self.holders.iter().map(|h| u64::from(h.reads)).sum()
    }

    /// May `owner` take `mode` (or `permits`) now, the queue aside?
    fn admissible(&self, owner: usize, mode: Mode, permits: u32) -> bool {
        let mine = self.pos(owner).map(|i| &self.holders[i]);
        if self.kind == KindSel::Sem {
            return mine.is_some() || self.used() + u64::from(permits) <= u64::from(self.limit);
        }
        match mode {
            // Readers share with readers; a holder may always add a read hold.
            Mode::Read => mine.is_some() || self.holders.iter().all(|h| h.writes == 0),
            // A writer excludes every other holder; a writer may take the write lock again.
            Mode::Write => {
                mine.is_some_and(|h| h.writes > 0) || self.holders.iter().all(|h| h.owner == owner)
            }
        }
    }

    fn grant(&mut self, owner: usize, mode: Mode, permits: u32, ttl: u64) -> u64 {
        let deadline = self.now.saturating_add(ttl);
        match (self.kind, self.pos(owner)) {
            // A leader campaigning again: a renewal, same term.
            (KindSel::El, Some(i)) => {
                self.holders[i].deadline = deadline;
                self.holders[i].token
            }
            // A semaphore holder asking again: its lease lasts at least ttl from now.
            (KindSel::Sem, Some(i)) => {
                let h = &mut self.holders[i];
                h.deadline = h.deadline.max(deadline);
                h.token
            }
            (_, Some(i)) => {
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
            (kind, None) => {
                let token = self.new_token();
                let (reads, writes) = match (kind, mode) {
                    (KindSel::Sem, _) => (permits, 0),
                    (_, Mode::Read) => (1, 0),
                    (_, Mode::Write) => (0, 1),
                };
                self.holders.push(MHolder {
                    owner,
                    reads,
                    writes,
                    deadline,
                    token,
                });
                token
            }
        }
    }

    /// Serves the head of the queue for as long as it can be granted.
    fn serve(&mut self, out: &mut Out) {
        loop {
            // Waiters that left are dropped when they reach the head of their line: the
            // upgrade slot, or the front of the arrival order.
            if self.waiters.first().is_some_and(|w| w.upgrade && w.gone) {
                self.waiters.remove(0);
                self.cov.hit(Rule::GoneSkipped);
            }
            let front = usize::from(self.waiters.first().is_some_and(|w| w.upgrade));
            while self.waiters.get(front).is_some_and(|w| w.gone) {
                self.waiters.remove(front);
                self.cov.hit(Rule::GoneSkipped);
            }
            // A waiting upgrade whose owner no longer holds is an ordinary request: back to
            // its place in arrival order.
            if self
                .waiters
                .first()
                .is_some_and(|w| w.upgrade && self.pos(w.owner).is_none())
            {
                let mut w = self.waiters.remove(0);
                w.upgrade = false;
                let at = self
                    .waiters
                    .iter()
                    .position(|o| !o.upgrade && o.id > w.id)
                    .unwrap_or(self.waiters.len());
                self.waiters.insert(at, w);
            }
            let Some(w) = self.waiters.first() else {
                return;
            };
            if self.held {
                return;
            }
            if self.kind == KindSel::Sem {
                if let Some(i) = self.pos(w.owner) {
                    if self.holders[i].reads != w.permits {
                        let w = self.waiters.remove(0);
                        out.timed_out.push(w.id);
                        self.cov.hit(Rule::SemQueuedOtherPermits);
                        continue;
                    }
                }
            }
            if !self.admissible(w.owner, w.mode, w.permits) {
                let fits = |o: &MWaiter| !o.gone && self.admissible(o.owner, o.mode, o.permits);
                if self.kind == KindSel::Sem && self.waiters[1..].iter().any(fits) {
                    self.cov.hit(Rule::SemHeldBack);
                }
                return;
            }
            let w = self.waiters.remove(0);
            let token = self.grant(w.owner, w.mode, w.permits, w.ttl);
            out.woken.push((w.id, token));
            self.cov.hit(Rule::GrantedFromQueue);
            if self.queued_held.contains(&w.id) {
                self.cov.hit(Rule::ServedAfterHeld);
            }
        }
    }

    /// What happens at the start of every command: time passes up to now, in order. The next
    /// event is the earliest lease deadline or wait deadline; a wait that ends strictly
    /// before the next lapse ends first, at a tie the lapse goes first. After each event the
    /// queue is served (grants are made now, so leases count from now).
    fn begin(&mut self, out: &mut Out) {
        let now = self.now;
        let mut events = 0;
        loop {
            let lapse = self
                .holders
                .iter()
                .map(|h| h.deadline)
                .filter(|d| *d <= now)
                .min();
            let untils: Vec<(u64, Option<u64>)> =
                self.waiters.iter().map(|w| (w.id, w.until)).collect();
            let woken_before = out.woken.len();
            let timeout = self
                .waiters
                .iter()
                .filter_map(|w| w.until.filter(|u| *u <= now).map(|u| (u, w.id)))
                .min();
            match (lapse, timeout) {
                (lapse, Some((until, id))) if lapse.is_none_or(|d| until < d) => {
                    let gone = self.waiters.iter().any(|w| w.id == id && w.gone);
                    self.waiters.retain(|w| w.id != id);
                    out.timed_out.push(id);
                    self.cov.hit(if gone {
                        Rule::GoneTimedOut
                    } else {
                        Rule::TimedOut
                    });
                    if lapse == Some(until + 1) {
                        self.cov.hit(Rule::Ended1msBefore);
                    }
                    self.serve(out);
                    if out.woken.len() > woken_before {
                        self.cov.hit(Rule::TimeoutLetIn);
                    }
                }
                (Some(at), _) => {
                    self.holders.retain(|h| at < h.deadline);
                    self.serve(out);
                    for (id, _) in &out.woken[woken_before..] {
                        if untils.contains(&(*id, Some(at))) {
                            self.cov.hit(Rule::TieGranted);
                        }
                    }
                }
                (None, _) => break,
            }
            events += 1;
        }
        if events >= 2 {
            self.cov.hit(Rule::LateTick);
        }
        self.serve(out);
    }

    fn enqueue(&mut self, owner: usize, mode: Mode, permits: u32, ttl: u64, wait: Wait, up: bool) {
        if self.held {
            self.queued_held.insert(wait.id);
            self.cov.hit(Rule::QueuedWhileHeld);
        }
        let w = MWaiter {
            id: wait.id,
            owner,
            mode,
            permits,
            ttl,
            until: wait.until,
            upgrade: false,
            gone: false,
        };
        if up && !self.waiters.iter().any(|w| w.upgrade) {
            self.waiters.insert(0, MWaiter { upgrade: true, ..w });
        } else {
            // Also a second upgrade request of the same owner: it waits in arrival order.
            self.waiters.push(w);
        }
    }

    fn lock(
        &mut self,
        owner: usize,
        mode: Mode,
        ttl: u64,
        wait: Option<Wait>,
        out: &mut Out,
    ) -> Result<Acquire, LockError> {
        self.begin(out);
        let writes = self.pos(owner).map(|i| self.holders[i].writes);
        let upgrade = self.kind == KindSel::Rw && mode == Mode::Write && writes == Some(0);
        if writes.is_some() && !upgrade {
            // Reentrant, or a leader's renewal: no new holder, so even while grants are held.
            if self.held {
                self.cov.hit(Rule::KeptWhileHeld);
            }
            return Ok(Acquire::Granted(self.grant(owner, mode, 1, ttl)));
        }
        if upgrade {
            if !self.held && self.holders.len() == 1 {
                return Ok(Acquire::Granted(self.grant(owner, mode, 1, ttl)));
            }
            // Another current reader already waits for the write lock (as an upgrade, or
            // with a write request it queued before it became a reader).
            let other_upgrade = self.waiters.iter().any(|w| {
                !w.gone && w.mode == Mode::Write && w.owner != owner && self.pos(w.owner).is_some()
            });
            if other_upgrade && wait.is_some() {
                self.cov.hit(Rule::Deadlock);
                return Err(LockError::UpgradeDeadlock);
            }
        } else if !self.held && self.waiters.is_empty() && self.admissible(owner, mode, 1) {
            return Ok(Acquire::Granted(self.grant(owner, mode, 1, ttl)));
        }
        let Some(wait) = wait else {
            if self.held {
                self.cov.hit(Rule::BusyWhileHeld);
            }
            return Ok(Acquire::Busy);
        };
        self.enqueue(owner, mode, 1, ttl, wait, upgrade);
        Ok(Acquire::Queued)
    }

    fn acquire(
        &mut self,
        owner: usize,
        limit: u32,
        permits: u32,
        ttl: u64,
        wait: Option<Wait>,
        out: &mut Out,
    ) -> Result<Acquire, LockError> {
        // Time passes first: a key whose holders all lapsed takes the request's limit.
        self.begin(out);
        let exists = !self.holders.is_empty() || !self.waiters.is_empty();
        if self.limit == 0 || !exists {
            self.limit = limit;
        } else if self.limit != limit {
            self.cov.hit(Rule::LimitMismatch);
            return Err(LockError::LimitMismatch { limit: self.limit });
        }
        if let Some(i) = self.pos(owner) {
            let held = self.holders[i].reads;
            if held != permits {
                self.cov.hit(Rule::PermitsMismatch);
                return Err(LockError::PermitsMismatch { permits: held });
            }
            self.cov.hit(Rule::SemRetry);
            if self.held {
                self.cov.hit(Rule::KeptWhileHeld);
            }
            return Ok(Acquire::Granted(self.grant(
                owner,
                Mode::Read,
                permits,
                ttl,
            )));
        }
        if !self.held && self.waiters.is_empty() && self.admissible(owner, Mode::Read, permits) {
            return Ok(Acquire::Granted(self.grant(
                owner,
                Mode::Read,
                permits,
                ttl,
            )));
        }
        let Some(wait) = wait else {
            if self.held {
                self.cov.hit(Rule::BusyWhileHeld);
            }
            return Ok(Acquire::Busy);
        };
        self.enqueue(owner, Mode::Read, permits, ttl, wait, false);
        Ok(Acquire::Queued)
    }

    fn unlock(&mut self, owner: usize, out: &mut Out) -> bool {
        self.begin(out);
        let Some(i) = self.pos(owner) else {
            return false;
        };
        if self.held {
            self.cov.hit(Rule::KeptWhileHeld);
        }
        let h = &mut self.holders[i];
        if self.kind != KindSel::Rw {
            // RESIGN and a semaphore's RELEASE give back everything.
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
        self.serve(out);
        true
    }

    fn renew(&mut self, owner: usize, ttl: u64, out: &mut Out) -> Option<u64> {
        self.begin(out);
        let i = self.pos(owner)?;
        if self.held {
            self.cov.hit(Rule::KeptWhileHeld);
        }
        self.holders[i].deadline = self.now.saturating_add(ttl);
        Some(self.holders[i].token)
    }

    fn cancel(&mut self, id: u64, out: &mut Out) -> bool {
        let before = self.waiters.len();
        self.waiters.retain(|w| w.id != id);
        let found = self.waiters.len() != before;
        self.begin(out);
        found
    }

    /// The shell takes every waiter out and puts back those still connected, in the order it
    /// got them: the first may take the upgrade slot, the rest keep arrival order.
    fn reattach(&mut self, out: &mut Out) {
        let taken = std::mem::take(&mut self.waiters);
        for (i, mut w) in taken.into_iter().filter(|w| !w.gone).enumerate() {
            w.upgrade = i == 0
                && self.kind == KindSel::Rw
                && w.mode == Mode::Write
                && self
                    .pos(w.owner)
                    .is_some_and(|p| self.holders[p].writes == 0);
            if w.upgrade {
                self.cov.hit(Rule::ReattachedUpgrade);
            }
            self.waiters.push(w);
        }
        if self.waiters.len() >= 2 {
            self.cov.hit(Rule::Reattached);
        }
        self.begin(out);
    }

    pub fn act(&mut self, act: &Act) -> (Reply, Out) {
        let mut out = Out::default();
        let reply = match act {
            Act::Lock {
                owner,
                mode,
                permits,
                limit,
                ttl,
                wait,
            } => Reply::Acquire(if self.kind == KindSel::Sem {
                self.acquire(*owner, *limit, *permits, *ttl, *wait, &mut out)
            } else {
                self.lock(*owner, *mode, *ttl, *wait, &mut out)
            }),
            Act::Unlock { owner } => Reply::Bool(self.unlock(*owner, &mut out)),
            Act::Renew { owner, ttl } => Reply::Token(self.renew(*owner, *ttl, &mut out)),
            Act::Cancel(id) => Reply::Bool(self.cancel(*id, &mut out)),
            Act::Tick => {
                self.begin(&mut out);
                Reply::Nothing
            }
            Act::Reattach => {
                self.reattach(&mut out);
                Reply::Nothing
            }
            Act::Kill(id) => {
                for w in self.waiters.iter_mut().filter(|w| w.id == *id) {
                    w.gone = true;
                }
                Reply::Nothing
            }
            Act::Advance(ms) => {
                self.now = self.now.saturating_add(*ms);
                Reply::Nothing
            }
            Act::Grants(g) => {
                self.held = *g == redis_lease_core::Grants::Held;
                Reply::Nothing
            }
        };
        (reply, out)
    }

    pub fn is_empty(&self) -> bool {
        self.holders.is_empty() && self.waiters.is_empty()
    }

    /// The key was deleted and a fresh one takes its place (the token source goes on).
    pub fn reset(&mut self) {
        assert!(self.is_empty());
        self.key_last = 0;
        self.limit = 0;
    }
}
