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

/// The surroundings of one operation: the time, the token source, which waiter ids still
/// belong to a connected client (a waiter that is gone is skipped, never granted), and whether
/// new grants may be made.
pub struct Env<'a> {
    /// The time, in whole ms (rounded down): leases lapse when it reaches their deadline.
    pub now: Ms,
    /// The clock is a fraction of a ms past `now`: new deadlines round up, so a lease never
    /// lasts less than its ttl.
    pub round_up: bool,
    pub tokens: &'a mut Tokens,
    pub alive: &'a dyn Fn(u64) -> bool,
    pub grants: Grants,
}

impl<'a> Env<'a> {
    /// An environment at `now` (whole ms) where every waiter is alive and grants are open.
    pub fn new(now: Ms, tokens: &'a mut Tokens) -> Env<'a> {
        Env {
            now,
            round_up: false,
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
