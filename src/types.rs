//! The two data types, `lease-rwl` (a read-write lock) and `lease-ldr` (an election): RDB,
//! AOF rewrite, copy, unlink, free and memory accounting. Both store a core `Lock`; waiters
//! are connections, so they are neither saved nor copied.

use std::ffi::CStr;
use std::os::raw::{c_char, c_int, c_void};

use redis_lease_core::{Changes, Election, Env, Hold, Kind, Lock, RwLock};
use redis_module::native_types::RedisType;
use redis_module::{raw, RedisString};

use crate::state;

/// RDB encoding version of both types. Version 1: last token, then each holder as
/// (owner, reads, writes, deadline ms since epoch, token).
pub const ENCVER: i32 = 1;

/// What the shell needs of a key's value, whichever its kind.
pub trait LeaseValue: Default + 'static {
    const KIND: Kind;
    /// The kind's name in `LEASE.APPLY`.
    const NAME: &'static str;
    /// The same, for C APIs.
    const NAME_C: &'static CStr;
    fn redis_type() -> &'static RedisType;
    fn lock(&self) -> &Lock;
    fn lock_mut(&mut self) -> &mut Lock;
    fn tick(&mut self, env: &mut Env) -> Changes;
    fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool);
}

impl LeaseValue for RwLock {
    const KIND: Kind = Kind::RwLock;
    const NAME: &'static str = "rwlock";
    const NAME_C: &'static CStr = c"rwlock";
    fn redis_type() -> &'static RedisType {
        &RWLOCK_TYPE
    }
    fn lock(&self) -> &Lock {
        &self.0
    }
    fn lock_mut(&mut self) -> &mut Lock {
        &mut self.0
    }
    fn tick(&mut self, env: &mut Env) -> Changes {
        RwLock::tick(self, env)
    }
    fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        RwLock::cancel(self, id, env)
    }
}

impl LeaseValue for Election {
    const KIND: Kind = Kind::Election;
    const NAME: &'static str = "leader";
    const NAME_C: &'static CStr = c"leader";
    fn redis_type() -> &'static RedisType {
        &ELECTION_TYPE
    }
    fn lock(&self) -> &Lock {
        &self.0
    }
    fn lock_mut(&mut self) -> &mut Lock {
        &mut self.0
    }
    fn tick(&mut self, env: &mut Env) -> Changes {
        Election::tick(self, env)
    }
    fn cancel(&mut self, id: u64, env: &mut Env) -> (Changes, bool) {
        Election::cancel(self, id, env)
    }
}

const fn methods<V: LeaseValue>(aux: bool) -> raw::RedisModuleTypeMethods {
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load::<V>),
        rdb_save: Some(rdb_save::<V>),
        aof_rewrite: Some(aof_rewrite::<V>),
        mem_usage: Some(mem_usage::<V>),
        digest: None,
        free: Some(free::<V>),
        // The token high-water mark rides along with the data set once (on the lock type).
        aux_load: if aux { Some(aux_load) } else { None },
        aux_save: if aux { Some(aux_save) } else { None },
        aux_save2: None,
        aux_save_triggers: if aux { raw::Aux::Before as i32 } else { 0 },
        free_effort: None,
        unlink: Some(unlink::<V>),
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: None,
        copy2: Some(copy2::<V>),
    }
}

pub static RWLOCK_TYPE: RedisType = RedisType::new("lease-rwl", ENCVER, methods::<RwLock>(true));
pub static ELECTION_TYPE: RedisType =
    RedisType::new("lease-ldr", ENCVER, methods::<Election>(false));

unsafe extern "C" fn free<V: LeaseValue>(value: *mut c_void) {
    // May run on a background thread (lazy free): touch only the value and the atomics.
    let v = Box::from_raw(value.cast::<V>());
    state::count_key(-1);
    state::count_holders(-(v.lock().holder_count() as i64));
}

unsafe extern "C" fn unlink<V: LeaseValue>(
    _key: *mut raw::RedisModuleString,
    value: *const c_void,
) {
    // The key left the keyspace (DEL, expiry, RENAME, overwrite): answer its waiters now.
    let Some(v) = value.cast::<V>().as_ref() else {
        return;
    };
    let ids: Vec<u64> = v.lock().waiters().map(|w| w.id).collect();
    for id in ids {
        crate::blocking::answer_gone(id);
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

unsafe extern "C" fn mem_usage<V: LeaseValue>(value: *const c_void) -> usize {
    let Some(v) = value.cast::<V>().as_ref() else {
        return 0;
    };
    let own = match raw::RedisModule_MallocSize {
        Some(f) => f(value as *mut c_void),
        None => size_class(std::mem::size_of::<V>()),
    };
    own + v.lock().heap_bytes_rounded(size_class)
}

unsafe extern "C" fn rdb_save<V: LeaseValue>(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    let v = &*value.cast::<V>();
    let lock = v.lock();
    raw::save_unsigned(rdb, lock.last_token());
    raw::save_unsigned(rdb, lock.holder_count() as u64);
    for h in lock.holders() {
        raw::save_slice(rdb, h.owner);
        raw::save_unsigned(rdb, h.hold.reads as u64);
        raw::save_unsigned(rdb, h.hold.writes as u64);
        raw::save_unsigned(rdb, h.hold.deadline);
        raw::save_unsigned(rdb, h.hold.token);
    }
}

fn load_lock(rdb: *mut raw::RedisModuleIO) -> Result<Lock, redis_module::error::Error> {
    let mut lock = Lock::new();
    lock.observe_token(raw::load_unsigned(rdb)?);
    let n = raw::load_unsigned(rdb)?;
    for _ in 0..n {
        let owner = raw::load_string_buffer(rdb)?;
        let reads = raw::load_unsigned(rdb)?.min(u32::MAX as u64) as u32;
        let writes = raw::load_unsigned(rdb)?.min(u32::MAX as u64) as u32;
        let deadline = raw::load_unsigned(rdb)?;
        let token = raw::load_unsigned(rdb)?;
        if reads + writes > 0 && !owner.as_ref().is_empty() {
            lock.restore(
                owner.as_ref(),
                Hold {
                    reads,
                    writes,
                    deadline,
                    token,
                },
            );
        }
    }
    Ok(lock)
}

unsafe extern "C" fn rdb_load<V: LeaseValue>(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
) -> *mut c_void {
    if encver > ENCVER {
        return std::ptr::null_mut();
    }
    let Ok(lock) = load_lock(rdb) else {
        return std::ptr::null_mut();
    };
    let mut v = Box::<V>::default();
    *v.lock_mut() = lock;
    state::with(|s| s.tokens.observe(v.lock().last_token()));
    state::count_key(1);
    state::count_holders(v.lock().holder_count() as i64);
    // Remember to look at this key when its first lease ends (the key name is known for
    // RDB loads and RESTORE; without it the key is pruned on access and by its TTL).
    let key = raw::RedisModule_GetKeyNameFromIO
        .map(|f| f(rdb))
        .unwrap_or(std::ptr::null());
    let db = raw::RedisModule_GetDbIdFromIO.map_or(-1, |f| f(rdb));
    if !key.is_null() && db >= 0 {
        let name = RedisString::string_as_slice(key as *mut _);
        crate::wakeup::remember(db, name, v.lock_mut());
    }
    Box::into_raw(v).cast()
}

unsafe extern "C" fn aof_rewrite<V: LeaseValue>(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    let v = &*value.cast::<V>();
    let lock = v.lock();
    let emit = raw::RedisModule_EmitAOF.unwrap();
    let cmd = c"LEASE.APPLY";
    let kind = V::NAME_C;
    let last = lock.last_token().min(i64::MAX as u64) as i64;
    // The server-wide high-water mark rides along with every key, so an AOF without an RDB
    // preamble keeps it as long as one lock key exists.
    let high = state::with(|s| s.tokens.high_water()).min(i64::MAX as u64) as i64;
    emit(
        aof,
        cmd.as_ptr(),
        c"scclcl".as_ptr(),
        key,
        kind.as_ptr(),
        c"LAST".as_ptr(),
        last,
        c"HIGH".as_ptr(),
        high,
    );
    for h in lock.holders() {
        emit(
            aof,
            cmd.as_ptr(),
            c"sccbllll".as_ptr(),
            key,
            kind.as_ptr(),
            c"HOLD".as_ptr(),
            h.owner.as_ptr() as *const c_char,
            h.owner.len(),
            h.hold.reads as i64,
            h.hold.writes as i64,
            h.hold.deadline.min(i64::MAX as u64) as i64,
            h.hold.token.min(i64::MAX as u64) as i64,
        );
    }
}

unsafe extern "C" fn copy2<V: LeaseValue>(
    ctx: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
) -> *mut c_void {
    let Some(v) = value.cast::<V>().as_ref() else {
        return std::ptr::null_mut();
    };
    let mut copy = Box::<V>::default();
    copy.lock_mut().observe_token(v.lock().last_token());
    for h in v.lock().holders() {
        copy.lock_mut().restore(h.owner, h.hold);
    }
    state::count_key(1);
    state::count_holders(copy.lock().holder_count() as i64);
    if !ctx.is_null() {
        let to = raw::RedisModule_GetToKeyNameFromOptCtx
            .map(|f| f(ctx))
            .unwrap_or(std::ptr::null());
        let db = raw::RedisModule_GetToDbIdFromOptCtx.map_or(-1, |f| f(ctx));
        if !to.is_null() && db >= 0 {
            crate::wakeup::remember(
                db,
                RedisString::string_as_slice(to as *mut _),
                copy.lock_mut(),
            );
        }
    }
    Box::into_raw(copy).cast()
}

unsafe extern "C" fn aux_save(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    raw::save_unsigned(rdb, state::with(|s| s.tokens.high_water()));
}

unsafe extern "C" fn aux_load(rdb: *mut raw::RedisModuleIO, encver: c_int, _when: c_int) -> c_int {
    if encver > ENCVER {
        return raw::REDISMODULE_ERR as c_int;
    }
    match raw::load_unsigned(rdb) {
        Ok(high) => {
            state::with(|s| s.tokens.observe(high));
            raw::REDISMODULE_OK as c_int
        }
        Err(_) => raw::REDISMODULE_ERR as c_int,
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
