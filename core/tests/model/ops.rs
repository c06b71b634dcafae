//! The generated operations and the scenarios they form.

use proptest::prelude::*;
use proptest::sample::Index;
use redis_lease_core::{Grants, Mode, Wait};

/// What kind of key a run drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindSel {
    Rw,
    El,
    Sem,
}

/// How a generated request waits; resolved against the clock and the key when it runs.
#[derive(Clone, Debug)]
pub enum WaitGen {
    /// WAIT 0: without a time limit.
    Forever,
    /// The wait ends `ms` from now (0: it has already ended when the next operation runs).
    In(u64),
    /// The wait ends at a current holder's lease deadline, moved by -1, 0 or +1 ms: the ties
    /// and near-ties of the time-order rule.
    AtLease(Index, i8),
    /// The wait ends with another waiter's (arrival order decides between them).
    AtWait(Index),
}

/// A generated operation; `Index` picks among the holders or waiters present when it runs.
#[derive(Clone, Debug)]
pub enum Op {
    /// RLOCK / WLOCK; CAMPAIGN (`write` ignored); ACQUIRE (`write` ignored, `permits`
    /// clamped to the limit, `other_limit` names a limit other than the key's).
    Lock {
        owner: usize,
        write: bool,
        permits: u32,
        other_limit: Option<u32>,
        ttl: u64,
        wait: Option<WaitGen>,
    },
    /// UNLOCK; RESIGN; RELEASE.
    Unlock {
        owner: usize,
    },
    Renew {
        owner: usize,
        ttl: u64,
    },
    /// A queued waiter is cancelled (its client left and the shell noticed).
    Cancel(Index),
    /// Cancel of an id that is not (or no longer) queued.
    CancelUnknown,
    /// A queued waiter's connection goes away (the `alive` oracle says false from now on);
    /// the core is not told.
    Kill(Index),
    Advance(u64),
    Tick,
    /// Grants are held (true: quarantine) or open from now on.
    Grants(bool),
    /// The shell takes the waiters out and puts the live ones back (DEBUG RELOAD, a lobby),
    /// then ticks.
    Reattach,
}

/// An operation with its concrete arguments.
#[derive(Clone, Debug)]
pub enum Act {
    Lock {
        owner: usize,
        mode: Mode,
        permits: u32,
        limit: u32,
        ttl: u64,
        wait: Option<Wait>,
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
    Grants(Grants),
    Reattach,
}

impl Act {
    /// True for the operations that call into the core.
    pub fn is_core_op(&self) -> bool {
        !matches!(self, Act::Kill(_) | Act::Advance(_) | Act::Grants(_))
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

fn wait() -> impl Strategy<Value = Option<WaitGen>> {
    prop_oneof![
        8 => Just(None),
        5 => Just(Some(WaitGen::Forever)),
        4 => (0..=40u64).prop_map(|ms| Some(WaitGen::In(ms))),
        1 => (41..=2_000u64).prop_map(|ms| Some(WaitGen::In(ms))),
        4 => (any::<Index>(), -1i8..=1).prop_map(|(i, d)| Some(WaitGen::AtLease(i, d))),
        1 => any::<Index>().prop_map(|i| Some(WaitGen::AtWait(i))),
    ]
}

fn op(owners: usize) -> impl Strategy<Value = Op> {
    let lock = (
        0..owners,
        any::<bool>(),
        1..=4u32,
        prop::option::weighted(0.05, 1..=5u32),
        ttl(),
        wait(),
    )
        .prop_map(|(owner, write, permits, other_limit, ttl, wait)| Op::Lock {
            owner,
            write,
            permits,
            other_limit,
            ttl,
            wait,
        });
    prop_oneof![
        12 => lock,
        6 => (0..owners).prop_map(|owner| Op::Unlock { owner }),
        2 => (0..owners, ttl()).prop_map(|(owner, ttl)| Op::Renew { owner, ttl }),
        2 => any::<Index>().prop_map(Op::Cancel),
        1 => Just(Op::CancelUnknown),
        2 => any::<Index>().prop_map(Op::Kill),
        4 => advance().prop_map(Op::Advance),
        2 => Just(Op::Tick),
        1 => prop::bool::weighted(0.3).prop_map(Op::Grants),
        1 => Just(Op::Reattach),
    ]
}

/// A run: whether an empty key is replaced by a fresh one (the key was deleted), a
/// semaphore's usual limit, and the operations (among 3 to 5 owners).
#[derive(Clone, Debug)]
pub struct Scenario {
    pub reset: bool,
    pub limit: u32,
    pub ops: Vec<Op>,
}

pub fn scenario(max_len: usize) -> impl Strategy<Value = Scenario> {
    (3usize..=5).prop_flat_map(move |n| {
        (
            Just(n),
            any::<bool>(),
            1..=5u32,
            prop::collection::vec(op(n), 1..max_len),
        )
            .prop_map(|(_, reset, limit, ops)| Scenario { reset, limit, ops })
    })
}
