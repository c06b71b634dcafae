//! The rules of redis-lease, as a plain state machine with no Redis types.
//!
//! One [`Lock`] is the state of one key: its holders (each with its own lease deadline and
//! fencing token), its wait queue and the last token it handed out. Every operation takes
//! `now` (milliseconds since the Unix epoch) as an argument, so the rules are tested with a
//! fake clock.
//!
//! Operations *decide* and then *apply* [`Effect`]s. The effects are what the Redis shell
//! replicates and writes to the AOF: a replica or a replay calls [`Lock::apply`] with the same
//! effects and reaches the same state, without consulting its own clock or queue.

mod effect;
mod holders;
mod lock;
mod queue;
mod tokens;

pub use effect::{Changes, DropReason, Effect, Woken};
pub use holders::{Hold, HolderView};
pub use lock::{Acquire, Election, Env, Kind, Lock, LockError, Request, RwLock};
pub use queue::Waiter;
pub use tokens::Tokens;

/// Milliseconds since the Unix epoch.
pub type Ms = u64;

/// The two kinds of hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    Read,
    Write,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }
}
