//! What a key of the module's types holds: the core's state of the key, and its entry in the
//! module's key index. Pure data: the data-type callbacks and commands share it.

use redis_lease_core::{Election, Keyed, RwLock, Semaphore};

use crate::index::Slot;

/// A key's value.
#[derive(Debug, Default)]
pub struct Stored<K> {
    pub core: K,
    /// Its entry in the key index ([`Slot::NONE`] until the shell knows its name).
    pub slot: Slot,
}

pub type RwStored = Stored<RwLock>;
pub type LeaderStored = Stored<Election>;
pub type SemStored = Stored<Semaphore>;

/// The three kinds of value, each with its place in the table of Redis types.
pub trait Saved: Keyed + Send + 'static {
    const INDEX: usize;
}

impl Saved for RwLock {
    const INDEX: usize = 0;
}
impl Saved for Election {
    const INDEX: usize = 1;
}
impl Saved for Semaphore {
    const INDEX: usize = 2;
}
