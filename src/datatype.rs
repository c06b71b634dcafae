//! The three data types, `lease-rwl` (a read-write lock), `lease-ldr` (an election) and
//! `lease-sem` (a semaphore): RDB, AOF rewrite, copy, unlink, free and memory accounting.
//! Waiters are connections, so they are neither saved nor copied. Every loaded field is
//! checked (`crate::validate`): a RESTORE payload is client input.

use std::ffi::CStr;

use redis_lease_core::{Hold, Id, Kind, Lock};
use redis_module::native_types::RedisType;
use redis_module::raw::RedisModuleType;

use crate::commit::ensure_slot;
use crate::ffi::io::Io;
use crate::ffi::key::{TypeHandle, Typed};
use crate::ffi::types::{methods, DataType, Field, Place};
use crate::index::Slot;
use crate::registry::Orphans;
use crate::value::{LeaderStored, RwStored, Saved, SemStored, Stored};
use crate::wire::{self, Arg, Word};
use crate::{config, holdback, schedule, state, validate};

/// RDB encoding version of every type. A value: last token, (a semaphore's limit), then each
/// holder as (owner, reads, writes, deadline ms since epoch, token) (versions 1 and 2), and
/// from version 3 its cap (ms since epoch, 0: none) after the token. The
/// data set's own record (the lock type's aux data): the token high-water mark (version 1),
/// then the evicted names whose grants are held back, as (db, name, until) (version 2).
pub const ENCVER: i32 = 3;

pub static RWLOCK_TYPE: RedisType = RedisType::new("lease-rwl", ENCVER, methods::<RwStored>(true));
pub static ELECTION_TYPE: RedisType =
    RedisType::new("lease-ldr", ENCVER, methods::<LeaderStored>(false));
pub static SEMAPHORE_TYPE: RedisType =
    RedisType::new("lease-sem", ENCVER, methods::<SemStored>(false));

static TYPES: [TypeHandle; 3] = [TypeHandle::new(), TypeHandle::new(), TypeHandle::new()];

/// Keeps the registered types' handles (once, after `redis_module!` created them).
pub fn init() {
    for (i, t) in [&RWLOCK_TYPE, &ELECTION_TYPE, &SEMAPHORE_TYPE]
        .iter()
        .enumerate()
    {
        TYPES[i].set(t);
    }
}

impl<K: Saved> Typed for Stored<K> {
    fn redis_type() -> *mut RedisModuleType {
        TYPES[K::INDEX].get()
    }
}

/// Rounds a request up to the allocator's size class (jemalloc's spacing: 8 and 16 below
/// 128 bytes, then four classes per doubling).
fn size_class(n: usize) -> usize {
    if n == 0 {
        return 0;
    }
    if n <= 8 {
        return 8;
    }
    if n <= 128 {
        return n.div_ceil(16) * 16;
    }
    let spacing = n.next_power_of_two() / 8;
    n.div_ceil(spacing) * spacing
}

fn load_lock(io: &mut Io, kind: Kind, encver: i32) -> Option<Lock> {
    let last = io.load_u64().ok()?;
    let limit = if kind == Kind::Semaphore {
        u32::try_from(io.load_u64().ok()?).ok()?
    } else {
        0
    };
    let n = io.load_u64().ok()?;
    let mut holds: Vec<(Id, Hold)> = Vec::new();
    for _ in 0..n {
        let owner = Id::from(io.load_bytes(config::ID_LENGTH_CEILING as usize).ok()?);
        let count = |v: u64| u32::try_from(v).ok();
        let hold = Hold {
            reads: count(io.load_u64().ok()?)?,
            writes: count(io.load_u64().ok()?)?,
            deadline: io.load_u64().ok()?,
            token: io.load_u64().ok()?,
            cap: if encver >= 3 { io.load_u64().ok()? } else { 0 },
        };
        if holds.iter().any(|(o, _)| *o == owner) {
            return None;
        }
        holds.push((owner, hold));
    }
    if last > validate::TOKEN_CEILING {
        return None;
    }
    let view = holds.iter().map(|(o, h)| (o, h));
    validate::key(kind, limit, view).ok()?;
    let mut lock = Lock::new();
    lock.observe_token(last);
    lock.restore_limit(limit);
    for (owner, h) in &holds {
        lock.restore(owner, *h);
    }
    Some(lock)
}

fn save_lock(lock: &Lock, kind: Kind) -> Vec<Field<'_>> {
    let mut out = vec![Field::U64(lock.last_token())];
    if kind == Kind::Semaphore {
        out.push(Field::U64(lock.limit().into()));
    }
    out.push(Field::U64(lock.holder_count() as u64));
    for h in lock.holders() {
        out.extend([
            Field::Id(h.owner),
            Field::U64(h.hold.reads.into()),
            Field::U64(h.hold.writes.into()),
            Field::U64(h.hold.deadline),
            Field::U64(h.hold.token),
            Field::U64(h.hold.cap),
        ]);
    }
    out
}

impl<K: Saved> DataType for Stored<K> {
    fn rdb_load(io: &mut Io, encver: i32) -> Option<Self> {
        if !(1..=ENCVER).contains(&encver) {
            return None;
        }
        let lock = load_lock(io, K::KIND, encver)?;
        let mut v = Stored::<K>::default();
        *v.core.lock_mut() = lock;
        let last = v.core.lock().last_token();
        state::with(move |s| s.tokens.observe(last));
        state::count_key(1);
        state::count_holders(v.core.lock().holder_count() as i64);
        // Look at this key when its first lease ends (the name is known for RDB loads and
        // RESTORE; without it, the key gets its entry on first access).
        if let (Some(name), Some(db)) = (io.key_name(), io.db()) {
            ensure_slot(&mut v, db, name);
            // An empty value (saved so by a bug) is looked at, and deleted, at once; so is a
            // key restored at a held-back name (it takes the lobby's waiters in).
            let now = Some(crate::clock::now_ms());
            let when = match holdback::lobby_slot(db, name) {
                Some(_) => now,
                None => crate::schedule::wakeup_of(v.core.lock()).or(now),
            };
            schedule::set(v.slot, when);
        }
        Some(v)
    }

    fn rdb_save(&self) -> Vec<Field<'_>> {
        save_lock(self.core.lock(), K::KIND)
    }

    fn rdb_save_empty() -> Vec<Field<'static>> {
        match K::KIND {
            Kind::Semaphore => vec![Field::U64(0), Field::U64(1), Field::U64(0)],
            _ => vec![Field::U64(0), Field::U64(0)],
        }
    }

    fn aof_rewrite(&self) -> Vec<(&'static CStr, Vec<Field<'_>>)> {
        // The records are spelled once, in `wire`; here they only become fields.
        let high = state::with(|s| s.tokens.high_water());
        let kind = Word::of_kind(K::KIND);
        wire::rewrite(K::KIND, self.core.lock(), high)
            .into_iter()
            .map(|records| {
                let mut args = vec![Field::Bytes(kind.as_str().as_bytes())];
                wire::encode_records(&records, |a| {
                    args.push(match a {
                        Arg::Word(w) => Field::Bytes(w.as_str().as_bytes()),
                        Arg::Id(id) => Field::Id(id),
                        Arg::Num(n) => Field::U64(n),
                    })
                });
                (c"LEASE.APPLY", args)
            })
            .collect()
    }

    fn mem_usage(&self) -> usize {
        self.core.lock().heap_bytes_rounded(size_class)
    }

    fn unlinked(&mut self, from: Option<Place>) {
        // The key left the keyspace (DEL, expiry, RENAME/MOVE source, overwrite, eviction):
        // its entry goes, and its waiters are decided on (see `events`).
        // (On servers that announce the new name before unlinking the old one, the entry
        // already follows the key: it is not at the old place any more, so it stays.)
        let here = from.is_none_or(|p| schedule::is_at(self.slot, p.db, p.name));
        if here {
            schedule::detach(std::mem::replace(&mut self.slot, Slot::NONE));
        }
        let lock = self.core.lock_mut();
        if lock.holder_count() == 0 && lock.waiter_count() == 0 {
            return;
        }
        let Some(p) = from else {
            crate::orphans::add(None, lock.take_waiters());
            return;
        };
        let until = lock.last_deadline().filter(|d| *d > crate::clock::now_ms());
        let o = Orphans {
            db: p.db,
            name: p.name.into(),
            waiters: lock.take_waiters(),
            flushed: None,
        };
        crate::orphans::unlinked(o, until, K::KIND, lock.limit());
    }

    fn copied(&self, to: Option<Place>) -> Self {
        let mut copy = Stored::<K>::default();
        let (from, into) = (self.core.lock(), copy.core.lock_mut());
        into.observe_token(from.last_token());
        into.restore_limit(from.limit());
        for h in from.holders() {
            into.restore(h.owner, h.hold);
        }
        state::count_key(1);
        state::count_holders(copy.core.lock().holder_count() as i64);
        if let Some(p) = to {
            ensure_slot(&mut copy, p.db, p.name);
            // A copy at a held-back name takes the lobby's waiters in at once.
            let when = match holdback::lobby_slot(p.db, p.name) {
                Some(_) => Some(crate::clock::now_ms()),
                None => crate::schedule::wakeup_of(copy.core.lock()),
            };
            schedule::set(copy.slot, when);
        }
        copy
    }

    fn freed(self) {
        // May run on a background thread (lazy free): touch only the value and the atomics.
        state::count_key(-1);
        state::count_holders(-(self.core.lock().holder_count() as i64));
    }

    fn aux_save() -> Vec<Field<'static>> {
        let held = holdback::evicted_now(crate::clock::now_ms());
        let mut out = vec![
            Field::U64(state::with(|s| s.tokens.high_water())),
            Field::U64(held.len() as u64),
        ];
        for (db, name, until) in held {
            out.extend([
                Field::U64(db as u64),
                Field::Owned(name.into()),
                Field::U64(until),
            ]);
        }
        out
    }

    fn aux_save_empty() -> Vec<Field<'static>> {
        // The clock floor keeps tokens moving on without the mark.
        vec![Field::U64(0), Field::U64(0)]
    }

    fn aux_load(io: &mut Io, encver: i32) -> bool {
        if !(1..=ENCVER).contains(&encver) {
            return false;
        }
        let Ok(high) = io.load_u64() else {
            return false;
        };
        if high > validate::TOKEN_CEILING {
            return false;
        }
        state::with(move |s| s.tokens.observe(high));
        if encver < 2 {
            return true;
        }
        let Ok(n) = io.load_u64() else {
            return false;
        };
        for _ in 0..n {
            let (Ok(db), Ok(name), Ok(until)) = (
                io.load_u64(),
                io.load_bytes(config::ID_LENGTH_CEILING as usize * 512),
                io.load_u64(),
            ) else {
                return false;
            };
            let Ok(db) = i32::try_from(db) else {
                return false;
            };
            if until <= validate::DEADLINE_CEILING {
                holdback::evicted(db, &name, until, false);
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::size_class;

    #[test]
    fn size_classes_follow_jemalloc() {
        assert_eq!(size_class(36), 48);
        assert_eq!(size_class(64), 64);
        assert_eq!(size_class(129), 160);
        assert_eq!(size_class(200), 224);
        assert_eq!(size_class(1000), 1024);
    }
}
