//! Opening a key of whichever of the module's types, by place: for the timer and the server
//! events, which know a key by its db and name only.

use redis_lease_core::{Election, RwLock, Semaphore};

use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, Typed};
use crate::ffi::string::RString;
use crate::value::{Saved, Stored};

/// What to do with a key, once its type is known.
pub trait Visitor {
    fn visit<K: Saved>(self, key: Key)
    where
        Stored<K>: Typed;
}

/// Opens `name` in `db` for writing and hands it to `v` with its type; gives `v` back if
/// there is no such key of the module's types.
pub fn visit<V: Visitor>(ctx: &Ctx, db: i32, name: &[u8], v: V) -> Result<(), V> {
    if !ctx.select_db(db) {
        return Err(v);
    }
    let name = RString::from_bytes(name);
    let Some(key) = Key::open(ctx, name.as_str(), Access::Write) else {
        return Err(v);
    };
    if key.peek::<Stored<RwLock>>().is_ok_and(|v| v.is_some()) {
        v.visit::<RwLock>(key);
    } else if key.peek::<Stored<Election>>().is_ok_and(|v| v.is_some()) {
        v.visit::<Election>(key);
    } else if key.peek::<Stored<Semaphore>>().is_ok_and(|v| v.is_some()) {
        v.visit::<Semaphore>(key);
    } else {
        return Err(v);
    }
    Ok(())
}
