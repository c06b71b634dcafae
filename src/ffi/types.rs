//! The data types' callbacks: `extern "C"` trampolines, each under the panic guard, around a
//! safe trait the entry layer implements for each value type.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

use redis_lease_core::Id;
use redis_module::raw;

use super::guard;
use super::io::Io;
use super::key::Typed;
use super::string::{RStr, RString};
use crate::num::saturating_i64;

/// Where a key is (or is going to be).
#[derive(Clone, Copy, Debug)]
pub struct Place<'a> {
    pub db: i32,
    pub name: &'a [u8],
}

/// One field of a saved value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    U64(u64),
    Bytes(&'a [u8]),
    /// An owner, written as its bytes.
    Id(&'a Id),
    /// Bytes the plan owns (copied out of the module's state).
    Owned(Vec<u8>),
}

/// A value type's behaviour towards Redis. Saving is planned first and written after, so a
/// bug that panics while planning leaves a well-formed file (with the value empty) rather than
/// a truncated one.
pub trait DataType: Typed + Sized {
    /// Reads a value; `None` refuses the payload (the load fails, nothing changes).
    fn rdb_load(io: &mut Io, encver: i32) -> Option<Self>;
    /// The fields of the value, in order.
    fn rdb_save(&self) -> Vec<Field<'_>>;
    /// The fields of an empty value (written if planning the real ones failed).
    fn rdb_save_empty() -> Vec<Field<'static>>;
    /// The commands that rebuild the value in an AOF being rewritten (each: a command
    /// name and its arguments after the key).
    fn aof_rewrite(&self) -> Vec<(&'static CStr, Vec<Field<'_>>)>;
    fn mem_usage(&self) -> usize;
    /// The key leaves the keyspace (DEL, RENAME, MOVE, eviction, overwrite...). Main thread.
    fn unlinked(&mut self, from: Option<Place>);
    /// A copy for COPY (and slot migration's RESTORE path); `to` is the new key.
    fn copied(&self, to: Option<Place>) -> Self;
    /// The value is freed; may run on a background thread (lazy free).
    fn freed(self);
    /// The data set's own record (saved once per RDB, before the keys), where `aux` is set.
    fn aux_save() -> Vec<Field<'static>> {
        Vec::new()
    }
    /// The record written if planning the real one failed.
    fn aux_save_empty() -> Vec<Field<'static>> {
        Vec::new()
    }
    fn aux_load(_io: &mut Io, _encver: i32) -> bool {
        true
    }
}

/// The methods table of `T`; `aux`: it carries the data set's own record.
pub const fn methods<T: DataType>(aux: bool) -> raw::RedisModuleTypeMethods {
    raw::RedisModuleTypeMethods {
        version: raw::REDISMODULE_TYPE_METHOD_VERSION as u64,
        rdb_load: Some(rdb_load::<T>),
        rdb_save: Some(rdb_save::<T>),
        aof_rewrite: Some(aof_rewrite::<T>),
        mem_usage: Some(mem_usage::<T>),
        digest: None,
        free: Some(free::<T>),
        aux_load: if aux { Some(aux_load::<T>) } else { None },
        aux_save: if aux { Some(aux_save::<T>) } else { None },
        aux_save_triggers: if aux { raw::Aux::Before as i32 } else { 0 },
        free_effort: None,
        unlink: None,
        copy: None,
        defrag: None,
        mem_usage2: None,
        free_effort2: None,
        unlink2: Some(unlink2::<T>),
        copy2: Some(copy2::<T>),
        aux_save2: None,
    }
}

/// # Safety
/// `ctx` must be the KeyOptCtx Redis passed to the running callback; `to` picks the copy's
/// destination instead of the key itself.
unsafe fn place<'a>(ctx: *mut raw::RedisModuleKeyOptCtx, to: bool) -> Option<Place<'a>> {
    if ctx.is_null() {
        return None;
    }
    let (name, db) = if to {
        (
            super::api_opt!(RedisModule_GetToKeyNameFromOptCtx)?(ctx),
            super::api_opt!(RedisModule_GetToDbIdFromOptCtx)?(ctx),
        )
    } else {
        (
            super::api_opt!(RedisModule_GetKeyNameFromOptCtx)?(ctx),
            super::api_opt!(RedisModule_GetDbIdFromOptCtx)?(ctx),
        )
    };
    let name = RStr::from_raw(name)?.bytes();
    (db >= 0).then_some(Place { db, name })
}

unsafe extern "C" fn rdb_load<T: DataType>(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
) -> *mut c_void {
    guard::callback("rdb_load", || {
        // SAFETY: the stream of this load.
        let mut io = unsafe { Io::from_raw(rdb) }?;
        T::rdb_load(&mut io, encver).map(|v| Box::into_raw(Box::new(v)).cast::<c_void>())
    })
    .flatten()
    .unwrap_or(std::ptr::null_mut())
}

unsafe extern "C" fn rdb_save<T: DataType>(rdb: *mut raw::RedisModuleIO, value: *mut c_void) {
    // SAFETY: Redis passes a value of this type and the stream being written.
    let (Some(v), Some(mut io)) = (unsafe { value.cast::<T>().as_ref() }, unsafe {
        Io::from_raw(rdb)
    }) else {
        return;
    };
    let plan = guard::callback("rdb_save", || v.rdb_save());
    write(&mut io, plan.unwrap_or_else(T::rdb_save_empty));
}

unsafe extern "C" fn aof_rewrite<T: DataType>(
    aof: *mut raw::RedisModuleIO,
    key: *mut raw::RedisModuleString,
    value: *mut c_void,
) {
    // SAFETY: Redis passes the rewrite stream, the key's name and its value.
    let parts = unsafe {
        (
            value.cast::<T>().as_ref(),
            Io::from_raw(aof),
            RStr::from_raw(key),
        )
    };
    let (Some(v), Some(mut io), Some(key)) = parts else {
        return;
    };
    let Some(plan) = guard::callback("aof_rewrite", || v.aof_rewrite()) else {
        return;
    };
    for (cmd, fields) in plan {
        let args: Vec<RString> = fields
            .into_iter()
            .map(|f| match f {
                Field::U64(n) => RString::from_i64(saturating_i64(n)),
                Field::Bytes(b) => RString::from_bytes(b),
                Field::Id(id) => RString::from_bytes(&id.bytes()),
                Field::Owned(b) => RString::from_bytes(&b),
            })
            .collect();
        io.emit_aof(cmd, key, &args);
    }
}

unsafe extern "C" fn mem_usage<T: DataType>(value: *const c_void) -> usize {
    guard::callback("mem_usage", || {
        // SAFETY: Redis passes a value of this type.
        let v = unsafe { value.cast::<T>().as_ref() }?;
        let own = match super::api_opt!(RedisModule_MallocSize) {
            // SAFETY: the value is a live allocation of Redis's allocator (ours is Redis's).
            Some(f) => unsafe { f(value as *mut c_void) },
            None => std::mem::size_of::<T>(),
        };
        Some(own + v.mem_usage())
    })
    .flatten()
    .unwrap_or(0)
}

unsafe extern "C" fn free<T: DataType>(value: *mut c_void) {
    if value.is_null() {
        return;
    }
    guard::callback("free", || {
        // SAFETY: Redis frees a value it owns exactly once; the box was made by this module.
        unsafe { Box::from_raw(value.cast::<T>()) }.freed();
    });
}

unsafe extern "C" fn unlink2<T: DataType>(
    ctx: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
) {
    guard::callback("unlink", || {
        // SAFETY: Redis hands over a value of this type as its key leaves the keyspace, on the
        // main thread; nothing else reads it during the call.
        let v = unsafe { (value as *mut T).as_mut() };
        if let Some(v) = v {
            // SAFETY: the unlink's own KeyOptCtx.
            v.unlinked(unsafe { place(ctx, false) });
        }
    });
}

unsafe extern "C" fn copy2<T: DataType>(
    ctx: *mut raw::RedisModuleKeyOptCtx,
    value: *const c_void,
) -> *mut c_void {
    guard::callback("copy", || {
        // SAFETY: Redis passes a value of this type and the copy's context.
        let v = unsafe { value.cast::<T>().as_ref() }?;
        // SAFETY: the copy's own KeyOptCtx.
        let copy = v.copied(unsafe { place(ctx, true) });
        Some(Box::into_raw(Box::new(copy)).cast::<c_void>())
    })
    .flatten()
    .unwrap_or(std::ptr::null_mut())
}

unsafe extern "C" fn aux_save<T: DataType>(rdb: *mut raw::RedisModuleIO, _when: c_int) {
    // SAFETY: the stream being written.
    let Some(mut io) = (unsafe { Io::from_raw(rdb) }) else {
        return;
    };
    let plan = guard::callback("aux_save", T::aux_save).unwrap_or_else(T::aux_save_empty);
    write(&mut io, plan);
}

fn write(io: &mut Io, plan: Vec<Field>) {
    for f in plan {
        match f {
            Field::U64(n) => io.save_u64(n),
            Field::Bytes(b) => io.save_bytes(b),
            Field::Id(id) => io.save_bytes(&id.bytes()),
            Field::Owned(b) => io.save_bytes(&b),
        }
    }
}

unsafe extern "C" fn aux_load<T: DataType>(
    rdb: *mut raw::RedisModuleIO,
    encver: c_int,
    _when: c_int,
) -> c_int {
    let ok = guard::callback("aux_load", || {
        // SAFETY: the stream being read.
        unsafe { Io::from_raw(rdb) }.is_some_and(|mut io| T::aux_load(&mut io, encver))
    });
    if ok == Some(true) {
        raw::REDISMODULE_OK as c_int
    } else {
        raw::REDISMODULE_ERR as c_int
    }
}
