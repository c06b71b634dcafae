//! An open key, on the raw API (the crate's key wrappers lack absolute expiry and close keys
//! they hand out). Signatures keep a value from outliving its key: the value is borrowed from
//! the key, and deleting consumes the key.

use std::cell::Cell;
use std::marker::PhantomData;
use std::os::raw::c_void;
use std::ptr::NonNull;

use redis_module::raw;

use super::api;
use super::ctx::Ctx;
use super::string::RStr;

/// A value type of this module, as Redis knows it.
pub trait Typed: 'static {
    fn redis_type() -> *mut raw::RedisModuleType;
}

/// The handle Redis gave a registered data type, kept where `Typed` can read it.
pub struct TypeHandle(std::sync::atomic::AtomicPtr<raw::RedisModuleType>);

impl TypeHandle {
    pub const fn new() -> TypeHandle {
        TypeHandle(std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
    }

    /// Keeps the handle of `t` (after `redis_module!` registered it).
    pub fn set(&self, t: &redis_module::native_types::RedisType) {
        self.0
            .store(*t.raw_type.borrow(), std::sync::atomic::Ordering::Relaxed);
    }

    pub fn get(&self) -> *mut raw::RedisModuleType {
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// The key holds a value of another type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongType;

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

pub struct Key<'a> {
    raw: NonNull<raw::RedisModuleKey>,
    name: RStr<'a>,
    ctx: &'a Ctx,
    /// The name's bytes and the db, asked of Redis once (the commit path needs them several
    /// times).
    bytes: Cell<Option<&'a [u8]>>,
    db: Cell<Option<i32>>,
    _not_send: PhantomData<*mut ()>,
}

impl<'a> Key<'a> {
    /// Opens `name` in the context's selected db. A missing key opened for reading may give
    /// `None` (Redis 7.0).
    pub fn open(ctx: &'a Ctx, name: RStr<'a>, access: Access) -> Option<Key<'a>> {
        let mode = match access {
            Access::Read => raw::REDISMODULE_READ,
            Access::Write => raw::REDISMODULE_READ | raw::REDISMODULE_WRITE,
        };
        // SAFETY: a live context and string; the key is closed when this handle drops.
        let key = unsafe { api!(RedisModule_OpenKey)(ctx.raw(), name.raw(), mode as i32) };
        NonNull::new(key.cast()).map(|raw| Key {
            raw,
            name,
            ctx,
            bytes: Cell::new(None),
            db: Cell::new(None),
            _not_send: PhantomData,
        })
    }

    fn raw(&self) -> *mut raw::RedisModuleKey {
        self.raw.as_ptr()
    }

    pub fn name(&self) -> RStr<'a> {
        self.name
    }

    pub fn ctx(&self) -> &'a Ctx {
        self.ctx
    }

    /// The name's bytes (they live as long as the name).
    pub fn name_bytes(&self) -> &'a [u8] {
        if let Some(b) = self.bytes.get() {
            return b;
        }
        let b = self.name.bytes();
        self.bytes.set(Some(b));
        b
    }

    /// The db the key is in.
    pub fn db(&self) -> i32 {
        if let Some(db) = self.db.get() {
            return db;
        }
        let db = self.ctx.db();
        self.db.set(Some(db));
        db
    }

    pub fn is_empty(&self) -> bool {
        // SAFETY: an open key.
        unsafe { api!(RedisModule_KeyType)(self.raw()) == raw::REDISMODULE_KEYTYPE_EMPTY as i32 }
    }

    fn value_ptr<V: Typed>(&self) -> Result<Option<*mut V>, WrongType> {
        if self.is_empty() {
            return Ok(None);
        }
        // SAFETY: an open, non-empty key: its type and value are Redis's to report.
        unsafe {
            if api!(RedisModule_ModuleTypeGetType)(self.raw()) != V::redis_type() {
                return Err(WrongType);
            }
            let v = api!(RedisModule_ModuleTypeGetValue)(self.raw()).cast::<V>();
            Ok((!v.is_null()).then_some(v))
        }
    }

    /// The value, if the key holds a `V` (`None` when empty).
    pub fn value<V: Typed>(&mut self) -> Result<Option<&mut V>, WrongType> {
        // SAFETY: the value belongs to the key, and the borrow is tied to `&mut self`, which
        // cannot be deleted or closed while the borrow lives.
        Ok(self.value_ptr::<V>()?.map(|v| unsafe { &mut *v }))
    }

    /// The value, read-only.
    pub fn peek<V: Typed>(&self) -> Result<Option<&V>, WrongType> {
        // SAFETY: as for `value`, shared.
        Ok(self.value_ptr::<V>()?.map(|v| unsafe { &*v }))
    }

    /// The value, created with `make` if the key is empty; true when it was created.
    pub fn value_or_create<V: Typed>(
        &mut self,
        make: impl FnOnce() -> V,
    ) -> Result<(&mut V, bool), WrongType> {
        if let Some(v) = self.value_ptr::<V>()? {
            // SAFETY: as for `value`.
            return Ok((unsafe { &mut *v }, false));
        }
        let ptr = Box::into_raw(Box::new(make()));
        // SAFETY: an empty key opened for writing; Redis takes ownership of the box and
        // frees it through the type's `free` callback.
        unsafe {
            api!(RedisModule_ModuleTypeSetValue)(self.raw(), V::redis_type(), ptr.cast::<c_void>());
            Ok((&mut *ptr, true))
        }
    }

    /// Deletes the key. Consumes the handle: no value borrowed from it can be used after.
    pub fn delete(self) {
        // SAFETY: an open key; Redis frees the value (calling the type's unlink callback
        // first, which may touch the module's state: no state borrow is held here).
        unsafe { api!(RedisModule_DeleteKey)(self.raw()) };
    }
}

impl Drop for Key<'_> {
    fn drop(&mut self) {
        // SAFETY: opened by `open`, closed once.
        unsafe { api!(RedisModule_CloseKey)(self.raw()) }
    }
}
