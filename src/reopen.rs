//! Grants opened again on a name whose waiters wait in the lobby: its key is made anew and
//! they queue in it in arrival order, then whoever can be served is served.

use redis_lease_core::{Election, Kind, RwLock, Semaphore};

use crate::clock::now_ms;
use crate::commit::{commit, ensure_slot, run, Origin};
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, Typed};
use crate::ffi::string::RString;
use crate::holdback::{self, Lobby};
use crate::value::{Saved, Stored};
use crate::{schedule, state, waiters};

/// Makes the key of `name` in `db` from its lobby if grants are open there now; true if it
/// did. Also ends the lobby's waits that ran out while grants are still held.
pub fn release(ctx: &Ctx, db: i32, name: &[u8]) -> bool {
    if holdback::lobby_slot(db, name).is_none() {
        return false;
    }
    let now = now_ms();
    if holdback::held_until(db, name, now).is_some() {
        holdback::expire(db, name, now);
        return false;
    }
    let Some(lobby) = holdback::take(db, name) else {
        return false;
    };
    match lobby.kind {
        Kind::RwLock => make::<RwLock>(ctx, db, name, lobby),
        Kind::Election => make::<Election>(ctx, db, name, lobby),
        Kind::Semaphore => make::<Semaphore>(ctx, db, name, lobby),
    }
}

fn make<K: Saved>(ctx: &Ctx, db: i32, name: &[u8], lobby: Lobby) -> bool
where
    Stored<K>: Typed,
{
    let gone = |lobby: Lobby| {
        schedule::detach(lobby.slot);
        for w in lobby.waiters {
            waiters::answer(w.id, waiters::Answer::Gone);
        }
        false
    };
    if !ctx.select_db(db) {
        return gone(lobby);
    }
    let rname = RString::from_bytes(name);
    let Some(mut key) = Key::open(ctx, rname.as_str(), Access::Write) else {
        return gone(lobby);
    };
    let Ok((v, created)) = key.value_or_create::<Stored<K>>(Stored::default) else {
        // Another type took the name meanwhile.
        return gone(lobby);
    };
    if created {
        state::count_key(1);
        v.core.lock_mut().restore_limit(lobby.limit);
    }
    if v.slot.is_none() {
        v.slot = lobby.slot;
    } else {
        schedule::detach(lobby.slot);
    }
    ensure_slot(v, db, name);
    let ids: Vec<u64> = lobby.waiters.iter().map(|w| w.id).collect();
    waiters::rebind(&ids, v.slot);
    for w in lobby.waiters {
        if waiters::alive(w.id) {
            v.core.lock_mut().requeue(w);
        }
    }
    let before = v.core.lock().holder_count();
    let (changes, ()) = run(v, (db, name), |core, env| (core.tick(env), ()));
    commit::<K>(
        key,
        before,
        changes,
        Origin::Here {
            owner: None,
            own: false,
        },
    );
    true
}
