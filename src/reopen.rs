//! A lobby's wake-up (grants may have opened on its name, a wait may have run out, a waiter
//! may have left): the name's held-back state goes through the commit path, which serves it
//! with grants closed, or makes it the key when they are open, or hands its waiters to a key
//! that arrived at the name meanwhile.

use redis_lease_core::{Election, Kind, RwLock, Semaphore};

use crate::commit::{decide, Open, Origin};
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, Typed};
use crate::ffi::string::RString;
use crate::holdback;
use crate::value::{Saved, Stored};
use crate::waiters;

/// Looks at the lobby of `name` in `db`, if there is one; true if there was.
pub fn release(ctx: &Ctx, db: i32, name: &[u8]) -> bool {
    let Some(kind) = holdback::lobby_kind(db, name) else {
        return false;
    };
    match kind {
        Kind::RwLock => wake::<RwLock>(ctx, db, name),
        Kind::Election => wake::<Election>(ctx, db, name),
        Kind::Semaphore => wake::<Semaphore>(ctx, db, name),
    }
    true
}

fn wake<K: Saved>(ctx: &Ctx, db: i32, name: &[u8])
where
    Stored<K>: Typed,
{
    let rname = RString::from_bytes(name);
    let key = ctx
        .select_db(db)
        .then(|| Key::open(ctx, rname.as_str(), Access::Write))
        .flatten();
    let origin = Origin::Here {
        owner: None,
        own: false,
    };
    let done = key.and_then(|key| {
        decide::<K, ()>(key, Open::Create, origin, |v, env| (v.core.tick(env), ())).ok()
    });
    if done.is_none() {
        // The name holds another type, or cannot be opened: nobody can be served there.
        if let Some(lobby) = holdback::take(db, name) {
            crate::schedule::detach(lobby.slot);
            for w in lobby.lock.waiters() {
                waiters::answer(w.id, waiters::Answer::WrongType);
            }
        }
    }
}
