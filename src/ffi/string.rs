//! Redis strings: borrowed ones (a command's arguments, a key name Redis passed in) and owned
//! ones the module creates and frees.

use std::marker::PhantomData;
use std::os::raw::c_char;
use std::ptr::NonNull;

use redis_module::raw;

use super::api;

/// A Redis string borrowed for `'a` (an argument of the running command, or a name Redis
/// passed to a callback).
#[derive(Clone, Copy)]
pub struct RStr<'a> {
    raw: NonNull<raw::RedisModuleString>,
    _life: PhantomData<&'a ()>,
    _not_send: PhantomData<*mut ()>,
}

impl<'a> RStr<'a> {
    /// # Safety
    /// `s` must be a valid Redis string that lives for `'a`.
    pub unsafe fn from_raw(s: *const raw::RedisModuleString) -> Option<RStr<'a>> {
        NonNull::new(s as *mut _).map(|raw| RStr {
            raw,
            _life: PhantomData,
            _not_send: PhantomData,
        })
    }

    pub fn raw(&self) -> *mut raw::RedisModuleString {
        self.raw.as_ptr()
    }

    /// The string's bytes, borrowed for as long as the string lives.
    pub fn bytes(&self) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: a valid string; Redis returns its buffer and length, which live as long as
        // the string (not modified while borrowed: the module never writes to it).
        unsafe {
            let p = api!(RedisModule_StringPtrLen)(self.raw(), &mut len);
            if p.is_null() {
                return &[];
            }
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
    }
}

/// A Redis string the module owns; freed when dropped.
pub struct RString {
    raw: NonNull<raw::RedisModuleString>,
    _not_send: PhantomData<*mut ()>,
}

impl RString {
    fn wrap(s: *mut raw::RedisModuleString) -> RString {
        match NonNull::new(s) {
            Some(raw) => RString {
                raw,
                _not_send: PhantomData,
            },
            None => super::missing("a string (RedisModule_CreateString returned null)"),
        }
    }

    /// A new string holding `bytes` (outside any context: not auto-freed by Redis).
    pub fn from_bytes(bytes: &[u8]) -> RString {
        // SAFETY: Redis copies `bytes`; a null context makes a string the module frees.
        RString::wrap(unsafe {
            api!(RedisModule_CreateString)(
                std::ptr::null_mut(),
                bytes.as_ptr().cast::<c_char>(),
                bytes.len(),
            )
        })
    }

    /// A new string holding the decimal digits of `n`.
    pub fn from_i64(n: i64) -> RString {
        // Formatted here: Redis's own ll2string costs ~300 instructions for a 16-digit token,
        // itoa a tenth of that (two per grant on the hot path).
        RString::from_bytes(itoa::Buffer::new().format(n).as_bytes())
    }

    pub fn as_str(&self) -> RStr<'_> {
        RStr {
            raw: self.raw,
            _life: PhantomData,
            _not_send: PhantomData,
        }
    }

    /// Keeps the string for the life of the process (a fixed word reused by every call).
    pub fn leak(self) -> *mut raw::RedisModuleString {
        let p = self.raw.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl Drop for RString {
    fn drop(&mut self) {
        // SAFETY: created by this module without a context, freed once, here.
        unsafe { api!(RedisModule_FreeString)(std::ptr::null_mut(), self.raw.as_ptr()) }
    }
}
