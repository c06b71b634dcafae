//! The core tests' one harness: the world the shell gives a key on every call (a clock, the
//! server-wide token source, which waiters' connections are still there), as an `Env`.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashSet;
use std::rc::Rc;

use redis_lease_core::{
    Acquire, AsId, Env, Grants, Id, Lock, LockError, Mode, Mono, Request, Tokens, Wait,
};

/// A realistic clock start (ms since the epoch).
pub const START: u64 = 1_700_000_000_000;

/// What the `alive` oracle answers for a waiter id.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Oracle {
    /// Alive unless its connection left (`World::leave`).
    #[default]
    UnlessLeft,
    AllAlive,
    AllGone,
    /// A different answer on every call (a shell that is not consistent).
    Flaky,
}

#[derive(Default)]
struct Links {
    left: HashSet<u64>,
    oracle: Oracle,
    calls: Cell<u64>,
}

impl Links {
    fn alive(&self, id: u64) -> bool {
        match self.oracle {
            Oracle::UnlessLeft => !self.left.contains(&id),
            Oracle::AllAlive => true,
            Oracle::AllGone => false,
            Oracle::Flaky => {
                self.calls.set(self.calls.get() + 1);
                (self.calls.get() ^ id).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 62 != 0
            }
        }
    }
}

/// A clock, a token source and waiters' connections; `env()` lends them to one core call.
pub struct World {
    pub now: u64,
    /// The clock is a fraction of a ms past `now` (new deadlines round up).
    pub round_up: bool,
    /// How far the wall clock (`now`) is ahead of the monotonic one, on which wait deadlines
    /// are kept: 0 until a test steps the wall clock alone.
    pub wall_ahead: i64,
    pub tokens: Tokens,
    /// Whether new grants are open (`Held`: the server is in quarantine).
    pub grants: Grants,
    links: Rc<RefCell<Links>>,
    alive: Box<dyn Fn(u64) -> bool>,
    next_id: u64,
}

impl World {
    /// A world whose clock reads `now`, with a fresh token source and no waiter gone.
    pub fn at(now: u64) -> World {
        let links = Rc::new(RefCell::new(Links::default()));
        let l = links.clone();
        World {
            now,
            round_up: false,
            wall_ahead: 0,
            tokens: Tokens::new(),
            grants: Grants::Open,
            links,
            alive: Box::new(move |id| l.borrow().alive(id)),
            next_id: 1,
        }
    }

    /// What the shell passes to the core for one call.
    pub fn env(&mut self) -> Env<'_> {
        Env {
            now: self.now,
            round_up: self.round_up,
            mono: Mono::at(self.mono()),
            tokens: &mut self.tokens,
            alive: &*self.alive,
            grants: self.grants,
        }
    }

    /// The monotonic clock's reading.
    pub fn mono(&self) -> u64 {
        self.now.saturating_add_signed(-self.wall_ahead)
    }

    /// Where the key must be looked at next, as the shell asks.
    pub fn next_wakeup(&self, lock: &Lock) -> Option<u64> {
        lock.next_wakeup(|u| Mono::at(self.mono()).to_wall(u, self.now))
    }

    /// A new waiter id: 1, 2, 3...
    pub fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// The last id `next_id` handed out (0 if none).
    pub fn last_id(&self) -> u64 {
        self.next_id - 1
    }

    /// Waiter `id`'s connection goes away.
    pub fn leave(&mut self, id: u64) {
        self.links.borrow_mut().left.insert(id);
    }

    /// What the `alive` oracle says of `id` (with `Oracle::UnlessLeft`: it did not leave).
    pub fn alive(&self, id: u64) -> bool {
        self.links.borrow().alive(id)
    }

    pub fn set_oracle(&mut self, oracle: Oracle) {
        self.links.borrow_mut().oracle = oracle;
    }
}

/// An owner's id for as long as the test runs (leaked: a few bytes per call), so that a
/// request can be made from a name in one expression.
pub fn id(owner: impl AsId) -> &'static Id {
    Box::leak(Box::new(owner.as_id().into_owned()))
}

/// A request; `wait: Some(id)` parks it under that waiter id, without a time limit, if it
/// cannot be granted now.
pub fn request(
    owner: impl AsId,
    mode: Mode,
    ttl: u64,
    wait: Option<u64>,
    max_waiters: usize,
) -> Request<'static> {
    Request {
        owner: id(owner),
        mode,
        ttl,
        wait: wait.map(Wait::forever),
        max_waiters,
        max_hold: 0,
    }
}

/// The token of a grant, None for any other answer; panics on an error.
pub fn granted(r: Result<Acquire, LockError>) -> Option<u64> {
    match r.expect("no error") {
        Acquire::Granted(t) => Some(t),
        _ => None,
    }
}
