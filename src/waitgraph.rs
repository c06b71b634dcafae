//! The server's wait-for graph, as the core's deadlock check walks it (`waitfor`): who waits
//! where comes from the waiter registry, each key's holders and queue from the keyspace, in
//! every db. Run only when a request is about to wait.

use redis_lease_core::waitfor::{closes_cycle, Graph};
use redis_lease_core::{Election, Id, Keyed, Kind, Lock, RwLock, Semaphore};
use smallvec::SmallVec;

use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key};
use crate::ffi::string::RString;
use crate::index::Slot;
use crate::value::Stored;
use crate::{schedule, state, waiters};

/// The graph, with the keys the running command holds open (their state is read from
/// there, never opened twice). Keys are named by their index entries (no name copied to the
/// heap).
struct Server<'a> {
    ctx: &'a Ctx,
    open: &'a [(Slot, Kind, &'a Lock)],
}

impl Graph for Server<'_> {
    type Key = Slot;

    fn waits(&self, owner: &Id) -> Vec<u64> {
        let owner = owner.clone();
        state::with(move |s| s.waiters.ids_of_owner(&owner).to_vec())
    }

    fn keys_of(&self, id: u64) -> Vec<Slot> {
        state::with(move |s| {
            s.waiters.get(id).map_or_else(Vec::new, |r| {
                let mut v = vec![r.slot];
                v.extend(r.more.iter().copied());
                v
            })
        })
    }

    fn with_lock(&self, slot: &Slot, f: &mut dyn FnMut(Kind, &Lock)) -> bool {
        if let Some((_, kind, lock)) = self.open.iter().find(|(s, _, _)| s == slot) {
            f(*kind, lock);
            return true;
        }
        let mut name = SmallVec::new();
        let Some(db) = schedule::place_into(*slot, &mut name) else {
            return false;
        };
        let before = self.ctx.db();
        if !self.ctx.select_db(db) {
            return false;
        }
        let rname = RString::from_bytes(&name);
        let found = Key::open(self.ctx, rname.as_str(), Access::Read).is_some_and(|k| read(&k, f));
        self.ctx.select_db(before);
        // A name whose waiters wait in the lobby (no key): its queue is there.
        found || crate::holdback::with_lock(db, &name, f)
    }

    fn alive(&self, id: u64) -> bool {
        waiters::alive(id)
    }
}

/// Calls `f` with the kind and state of the lock in `key`; false if it holds none.
fn read(key: &Key, f: &mut dyn FnMut(Kind, &Lock)) -> bool {
    if let Ok(Some(v)) = key.peek::<Stored<RwLock>>() {
        f(Kind::RwLock, v.core.lock());
    } else if let Ok(Some(v)) = key.peek::<Stored<Election>>() {
        f(Kind::Election, v.core.lock());
    } else if let Ok(Some(v)) = key.peek::<Stored<Semaphore>>() {
        f(Kind::Semaphore, v.core.lock());
    } else {
        return false;
    }
    true
}

/// Whether waiter `id` of `owner`, just queued on the keys `open` (the running command's,
/// still open, by their index entries), closes a cycle of waits.
pub fn deadlocks(ctx: &Ctx, owner: &Id, id: u64, open: &[(Slot, Kind, &Lock)], now: u64) -> bool {
    let g = Server { ctx, open };
    let keys: SmallVec<[Slot; 4]> = open.iter().map(|(s, _, _)| *s).collect();
    closes_cycle(&g, owner, id, &keys, now)
}
