//! RDB and AOF streams of the data types. Loading reports errors instead of stopping Redis:
//! the module sets `REDISMODULE_OPTIONS_HANDLE_IO_ERRORS` (see `server::init`), so a truncated
//! or crafted payload (RESTORE) fails the load and nothing else.

use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr::NonNull;

use redis_module::raw;

use super::api;
use super::string::{RStr, RString};

/// A truncated or unreadable stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadError;

/// An RDB (or DUMP payload) being read or written.
pub struct Io {
    raw: NonNull<raw::RedisModuleIO>,
    _not_send: PhantomData<*mut ()>,
}

impl Io {
    /// # Safety
    /// `io` must be the stream Redis passed to the running callback.
    pub unsafe fn from_raw(io: *mut raw::RedisModuleIO) -> Option<Io> {
        NonNull::new(io).map(|raw| Io {
            raw,
            _not_send: PhantomData,
        })
    }

    fn raw(&self) -> *mut raw::RedisModuleIO {
        self.raw.as_ptr()
    }

    fn check(&self) -> Result<(), LoadError> {
        // SAFETY: a live stream.
        let failed =
            super::api_opt!(RedisModule_IsIOError).is_some_and(|f| unsafe { f(self.raw()) } != 0);
        if failed {
            Err(LoadError)
        } else {
            Ok(())
        }
    }

    pub fn save_u64(&mut self, v: u64) {
        // SAFETY: a live stream being written.
        unsafe { api!(RedisModule_SaveUnsigned)(self.raw(), v) }
    }

    pub fn save_bytes(&mut self, b: &[u8]) {
        // SAFETY: as above; Redis copies `b`.
        unsafe {
            api!(RedisModule_SaveStringBuffer)(self.raw(), b.as_ptr().cast::<c_char>(), b.len())
        }
    }

    pub fn load_u64(&mut self) -> Result<u64, LoadError> {
        // SAFETY: a live stream being read.
        let v = unsafe { api!(RedisModule_LoadUnsigned)(self.raw()) };
        self.check().map(|()| v)
    }

    /// A string of at most `max` bytes.
    pub fn load_bytes(&mut self, max: usize) -> Result<Vec<u8>, LoadError> {
        let mut len = 0usize;
        // SAFETY: a live stream being read; Redis allocates the buffer, which is copied and
        // freed here.
        unsafe {
            let p = api!(RedisModule_LoadStringBuffer)(self.raw(), &mut len);
            self.check()?;
            if p.is_null() {
                return Err(LoadError);
            }
            let out =
                (len <= max).then(|| std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec());
            api!(RedisModule_Free)(p.cast());
            out.ok_or(LoadError)
        }
    }

    /// The name of the key being loaded (RDB loads and RESTORE).
    pub fn key_name(&self) -> Option<&[u8]> {
        let f = super::api_opt!(RedisModule_GetKeyNameFromIO)?;
        // SAFETY: a live stream; the name lives as long as the load of this key.
        unsafe { RStr::from_raw(f(self.raw())) }.map(|s| s.bytes())
    }

    /// The db of the key being loaded.
    pub fn db(&self) -> Option<i32> {
        let f = super::api_opt!(RedisModule_GetDbIdFromIO)?;
        // SAFETY: a live stream.
        let db = unsafe { f(self.raw()) };
        (db >= 0).then_some(db)
    }

    /// Appends `cmd args...` to the AOF being rewritten.
    pub fn emit_aof(&mut self, cmd: &std::ffi::CStr, key: RStr, args: &[RString]) {
        let argv: Vec<*mut raw::RedisModuleString> =
            args.iter().map(|a| a.as_str().raw()).collect();
        // SAFETY: an AOF rewrite stream. The key goes by "s", which copies a string Redis
        // made on its stack (a rewrite's key is one; "v" would retain it, which Redis refuses);
        // "v" takes the vector of the module's own live strings. Redis writes them into the
        // file before returning.
        unsafe {
            api!(RedisModule_EmitAOF)(
                self.raw(),
                cmd.as_ptr(),
                c"sv".as_ptr(),
                key.raw(),
                argv.as_ptr(),
                argv.len(),
            );
        }
    }
}
