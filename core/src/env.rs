use std::cell::Cell;

use crate::{Ms, Tokens};

/// Whether new grants may be made (see [`Env::grants`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Grants {
    #[default]
    Open,
    /// No new holder and no new token: the server is in quarantine after a failover or a
    /// restart, or the key's last leases were evicted and may still be running. Holds that
    /// exist may still be renewed, released and taken again; requests with a wait stay
    /// parked and are served when grants open again.
    Held,
}

/// The monotonic clock, in ms, on which wait deadlines ([`crate::Wait::until`]) are kept: a
/// wait is a local duration, so no step of the wall clock may lengthen or shorten it (lease
/// deadlines stay wall-clock ms, the same on every server). Read at most once per operation,
/// and only when a wait deadline is looked at, so an operation on a key nobody waits for
/// never reads it.
pub struct Mono<'a> {
    read: Option<&'a dyn Fn() -> Ms>,
    at: Cell<Option<Ms>>,
}

impl<'a> Mono<'a> {
    /// A clock that reads `ms` (a fake clock, or one read already).
    pub fn at(ms: Ms) -> Mono<'a> {
        Mono {
            read: None,
            at: Cell::new(Some(ms)),
        }
    }

    /// A clock read by `read` when first needed, then fixed for the operation.
    pub fn read(read: &'a dyn Fn() -> Ms) -> Mono<'a> {
        Mono {
            read: Some(read),
            at: Cell::new(None),
        }
    }

    /// The monotonic time, in whole ms.
    pub fn now(&self) -> Ms {
        if let Some(ms) = self.at.get() {
            return ms;
        }
        let ms = self.read.map_or(0, |f| f());
        self.at.set(Some(ms));
        ms
    }

    /// The wall-clock ms at which monotonic `until` falls, seen from wall-clock `now` (the
    /// two clocks' distance now: a step of the wall clock moves it).
    pub fn to_wall(&self, until: Ms, now: Ms) -> Ms {
        now.saturating_add(until).saturating_sub(self.now())
    }
}

/// The surroundings of one operation: the time, the token source, which waiter ids still
/// belong to a connected client (a waiter that is gone is skipped, never granted), and whether
/// new grants are open.
pub struct Env<'a> {
    /// The time, in whole ms (rounded down): leases lapse when it reaches their deadline.
    pub now: Ms,
    /// The clock is a fraction of a ms past `now`: new deadlines round up, so a lease never
    /// lasts less than its ttl.
    pub round_up: bool,
    /// The monotonic clock, for wait deadlines.
    pub mono: Mono<'a>,
    pub tokens: &'a mut Tokens,
    pub alive: &'a dyn Fn(u64) -> bool,
    pub grants: Grants,
}

impl<'a> Env<'a> {
    /// An environment at `now` (whole ms; the monotonic clock reads the same) where every
    /// waiter is alive and grants are open.
    pub fn new(now: Ms, tokens: &'a mut Tokens) -> Env<'a> {
        Env {
            now,
            round_up: false,
            mono: Mono::at(now),
            tokens,
            alive: &|_| true,
            grants: Grants::Open,
        }
    }

    /// When a lease of `ttl` granted now ends.
    pub fn deadline(&self, ttl: u64) -> Ms {
        self.now
            .saturating_add(ttl)
            .saturating_add(u64::from(self.round_up))
    }

    /// Whole ms left until `at`, rounded down against the clock's fraction of a ms.
    pub fn left(&self, at: Ms) -> u64 {
        at.saturating_sub(self.now)
            .saturating_sub(u64::from(self.round_up))
    }

    pub(crate) fn may_grant(&self) -> bool {
        self.grants == Grants::Open
    }
}
