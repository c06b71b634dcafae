use smallvec::SmallVec;

use crate::id::Id;
use crate::{Mode, Ms};

/// Why a holder was removed as a whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Its lease deadline passed.
    Lapse,
    /// A leader resigned.
    Resign,
}

/// One deterministic state change. Applying the same effects in the same order to the same
/// state gives the same state, whatever the clock says: this is what replicas and the AOF see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// `owner` gains one hold of `mode`; its lease now ends at `deadline` and its token is
    /// `token` (the same token for a reentrant grant, a new one otherwise).
    Grant {
        owner: Id,
        mode: Mode,
        deadline: Ms,
        token: u64,
    },
    /// A semaphore's `owner` now holds `permits` until `deadline`, with `token`.
    Take {
        owner: Id,
        permits: u32,
        deadline: Ms,
        token: u64,
    },
    /// A semaphore key is created with this limit (before its first grant).
    Limit { limit: u32 },
    /// `owner` gives back one hold: its write hold first, else one read hold (a semaphore
    /// holder gives back all its permits).
    Release { owner: Id },
    /// `owner` loses all its holds.
    Drop { owner: Id, reason: DropReason },
    /// `owner`'s lease now ends at `deadline`.
    Renew { owner: Id, deadline: Ms },
    /// `owner`'s hold may not be renewed past `at` (right after the grant that made it a
    /// holder with a max hold).
    Cap { owner: Id, at: Ms },
}

impl Effect {
    /// The owner the effect is about (`None` for a key-wide effect).
    pub fn owner(&self) -> Option<&Id> {
        match self {
            Effect::Grant { owner, .. }
            | Effect::Take { owner, .. }
            | Effect::Release { owner }
            | Effect::Drop { owner, .. }
            | Effect::Renew { owner, .. }
            | Effect::Cap { owner, .. } => Some(owner),
            Effect::Limit { .. } => None,
        }
    }
}

/// A waiter that was granted: the shell answers it `token`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Woken {
    pub waiter: u64,
    pub token: u64,
}

/// A hold that ended: its owner gave back its last hold, resigned or lapsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ended {
    /// The effect that ended it (an index into [`Changes::effects`]).
    pub effect: u32,
    /// How long it was held, in ms: since its token was issued (see [`Tokens::issued_by`]).
    ///
    /// [`Tokens::issued_by`]: crate::Tokens::issued_by
    pub held_ms: u64,
}

/// What one operation changed: the effects in order, the waiters granted, and the waiters
/// whose wait ended without a grant. Every waiter that leaves the queue other than by
/// [`cancel`](crate::RwLock::cancel) is in exactly one of `woken` and `timed_out`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Inline for the common one or two effects of an operation: no allocation.
    pub effects: SmallVec<[Effect; 2]>,
    pub woken: Vec<Woken>,
    pub timed_out: Vec<u64>,
    /// Multi-key waiters that reached the head of this key's queue and could be granted here:
    /// the shell grants them if every other key of theirs is ready too (see `multi`).
    pub ready: Vec<u64>,
    /// The holds that ended, for the shell's hold-time figures (not replicated: a replica
    /// learns them from the effects).
    pub ended: SmallVec<[Ended; 1]>,
}

impl Changes {
    /// Adds the changes of a later operation.
    pub fn append(&mut self, more: Changes) {
        if self.is_empty() {
            *self = more;
            return;
        }
        let base = self.effects.len() as u32;
        let ended = more.ended.into_iter().map(|e| Ended {
            effect: e.effect + base,
            ..e
        });
        self.ended.extend(ended);
        self.effects.extend(more.effects);
        self.woken.extend(more.woken);
        self.timed_out.extend(more.timed_out);
        self.ready.extend(more.ready);
    }

    pub fn is_empty(&self) -> bool {
        self.effects.is_empty()
            && self.woken.is_empty()
            && self.timed_out.is_empty()
            && self.ready.is_empty()
    }
}
