//! The server's wait-for graph, as the core's deadlock check walks it (`waitfor`): who waits
//! where comes from the waiter registry, each key's holders and queue from the keyspace, in
//! every db. Run only when a request is about to wait.

use redis_lease_core::waitfor::{closes_cycle, Graph};
use redis_lease_core::{Election, Id, Keyed, Kind, Lock, RwLock, Semaphore};

use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key};
use crate::ffi::string::RString;
use crate::value::Stored;
use crate::{schedule, state, waiters};

type Place = (i32, Box<[u8]>);

/// The graph, with the keys the running command holds open (their state is read from
/// there, never opened twice).
struct Server<'a> {
    ctx: &'a Ctx,
    open: &'a [(Place, Kind, &'a Lock)],
}

impl Graph for Server<'_> {
    type Key = Place;

    fn waits(&self, owner: &Id) -> Vec<u64> {
        let owner = owner.clone();
        state::with(move |s| s.waiters.ids_of_owner(&owner).to_vec())
    }

    fn keys_of(&self, id: u64) -> Vec<Place> {
        let slots = state::with(move |s| {
            s.waiters.get(id).map_or_else(Vec::new, |r| {
                let mut v = vec![r.slot];
                v.extend(r.more.iter().copied());
                v
            })
        });
        slots.into_iter().filter_map(schedule::place).collect()
    }

    fn with_lock(&self, key: &Place, f: &mut dyn FnMut(Kind, &Lock)) -> bool {
        if let Some((_, kind, lock)) = self.open.iter().find(|(p, _, _)| p == key) {
            f(*kind, lock);
            return true;
        }
        let before = self.ctx.db();
        if !self.ctx.select_db(key.0) {
            return false;
        }
        let name = RString::from_bytes(&key.1);
        let found = Key::open(self.ctx, name.as_str(), Access::Read).is_some_and(|k| {
            if let Ok(Some(v)) = k.peek::<Stored<RwLock>>() {
                f(Kind::RwLock, v.core.lock());
            } else if let Ok(Some(v)) = k.peek::<Stored<Election>>() {
                f(Kind::Election, v.core.lock());
            } else if let Ok(Some(v)) = k.peek::<Stored<Semaphore>>() {
                f(Kind::Semaphore, v.core.lock());
            } else {
                return false;
            }
            true
        });
        self.ctx.select_db(before);
        found
    }

    fn alive(&self, id: u64) -> bool {
        waiters::alive(id)
    }
}

/// Whether waiter `id` of `owner`, just queued on the keys `open` (the running command's,
/// still open), closes a cycle of waits.
pub fn deadlocks(ctx: &Ctx, owner: &Id, id: u64, open: &[(Place, Kind, &Lock)], now: u64) -> bool {
    let g = Server { ctx, open };
    let keys: Vec<Place> = open.iter().map(|(p, _, _)| p.clone()).collect();
    closes_cycle(&g, owner, id, &keys, now)
}
