//! The rules of redis-lease, as a plain state machine with no Redis types.
//!
//! One [`Lock`] is the state of one key: its holders (each with its own lease deadline and
//! fencing token), its wait queue (each waiter with its own wait deadline) and the last token
//! it handed out. A key is a read-write lock ([`RwLock`]), an election ([`Election`]) or a
//! counting semaphore ([`Semaphore`]). Every operation takes `now` (milliseconds since the
//! Unix epoch) as an argument, so the rules are tested with a fake clock, and the core alone
//! decides, in time order, whether a waiter is granted or its wait ends.
//!
//! Operations *decide* and then *apply* [`Effect`]s. The effects are what the Redis shell
//! replicates and writes to the AOF: a replica or a replay calls [`Lock::apply`] with the same
//! effects and reaches the same state, without consulting its own clock or queue.

mod effect;
mod env;
mod holders;
mod id;
mod lock;
pub mod multi;
mod queue;
mod tokens;
pub mod waitfor;

pub use effect::{Changes, DropReason, Effect, Ended, Woken};
pub use env::{Env, Grants, Mono};
pub use holders::{Hold, HolderView};
pub use id::{AsId, Id, IdBytes};
pub use lock::{
    Acquire, Election, Keyed, Kind, Lock, LockError, Permits, Request, RwLock, Semaphore, Wait,
};
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
