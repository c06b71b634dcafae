//! A small owner of an open Redis key, on the raw API: the crate's key wrappers lack absolute
//! expiry and leak or double-close in places (see DESIGN.md).

use std::os::raw::c_void;
use std::ptr::NonNull;

use redis_module::raw;
use redis_module::RedisString;

use crate::types::LeaseValue;

pub struct Key {
    key: NonNull<raw::RedisModuleKey>,
}

/// What an open key holds.
pub enum Found<'a, V> {
    Empty,
    Ours(&'a mut V),
    WrongType,
}

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

impl Key {
    fn open_mode(
        ctx: *mut raw::RedisModuleCtx,
        name: *mut raw::RedisModuleString,
        mode: u32,
    ) -> Option<Key> {
        let key = unsafe { raw::RedisModule_OpenKey.unwrap()(ctx, name, mode as i32) };
        NonNull::new(key.cast()).map(|key| Key { key })
    }

    /// Opens `name` in the context's selected db for reading and writing.
    pub fn open_str(ctx: *mut raw::RedisModuleCtx, name: &RedisString) -> Option<Key> {
        Key::open_mode(
            ctx,
            name.inner,
            raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        )
    }

    /// Opens `name` for reading only, as read commands should (on Redis 7.0 a missing key
    /// gives `None`).
    pub fn open_read(ctx: *mut raw::RedisModuleCtx, name: &RedisString) -> Option<Key> {
        Key::open_mode(ctx, name.inner, raw::REDISMODULE_READ)
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.key.as_ptr()
    }

    /// The value, if the key is empty or holds a `V`.
    pub fn get<V: LeaseValue>(&self) -> Found<'_, V> {
        unsafe {
            if raw::RedisModule_KeyType.unwrap()(self.raw())
                == raw::REDISMODULE_KEYTYPE_EMPTY as i32
            {
                return Found::Empty;
            }
            let ty = raw::RedisModule_ModuleTypeGetType.unwrap()(self.raw());
            if ty != *V::redis_type().raw_type.borrow() {
                return Found::WrongType;
            }
            let v = raw::RedisModule_ModuleTypeGetValue.unwrap()(self.raw()).cast::<V>();
            match v.as_mut() {
                Some(v) => Found::Ours(v),
                None => Found::WrongType,
            }
        }
    }

    /// Stores a new value in an empty key and returns it. The value belongs to Redis, not to
    /// this handle, hence a `&mut` from `&self`.
    #[allow(clippy::mut_from_ref)]
    pub fn create<V: LeaseValue>(&self) -> &mut V {
        let ptr = Box::into_raw(Box::<V>::default());
        unsafe {
            raw::RedisModule_ModuleTypeSetValue.unwrap()(
                self.raw(),
                *V::redis_type().raw_type.borrow(),
                ptr.cast::<c_void>(),
            );
            crate::state::count_key(1);
            &mut *ptr
        }
    }

    pub fn delete(&self) {
        unsafe {
            raw::RedisModule_DeleteKey.unwrap()(self.raw());
        }
    }

    /// Makes the key expire at `at` (ms since the epoch), or never with `None`.
    pub fn expire_at(&self, at: Option<u64>) {
        unsafe {
            match at {
                Some(at) => {
                    let at = at.min(i64::MAX as u64) as i64;
                    match raw::RedisModule_SetAbsExpire {
                        Some(f) => f(self.raw(), at),
                        None => raw::RedisModule_SetExpire.unwrap()(
                            self.raw(),
                            (at - crate::clock::now_ms() as i64).max(1),
                        ),
                    };
                }
                None => {
                    raw::RedisModule_SetExpire.unwrap()(
                        self.raw(),
                        raw::REDISMODULE_NO_EXPIRE as i64,
                    );
                }
            }
        }
    }
}

impl Drop for Key {
    fn drop(&mut self) {
        unsafe { raw::RedisModule_CloseKey.unwrap()(self.raw()) }
    }
}
