//! Replies, written on the running command's (or blocked client's) context.

use std::borrow::Cow;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_long};

use super::api;
use super::ctx::Ctx;

/// What a command answers, where it is one value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    Int(i64),
    Nil,
    Ok,
    /// The client was parked: it is answered later.
    Parked,
    /// The handler wrote its reply itself (maps, arrays).
    Written,
}

/// An error reply: "CODE detail", ASCII without NUL (see [`crate::text`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplyError(pub Cow<'static, str>);

impl From<String> for ReplyError {
    fn from(s: String) -> Self {
        ReplyError(Cow::Owned(s))
    }
}

impl From<&'static str> for ReplyError {
    fn from(s: &'static str) -> Self {
        ReplyError(Cow::Borrowed(s))
    }
}

const FALLBACK: &CStr = c"ERR the module built an error text it cannot send (a bug)";

impl Ctx {
    pub fn reply(&self, r: Reply) {
        match r {
            Reply::Int(n) => self.reply_int(n),
            Reply::Nil => self.reply_null(),
            Reply::Ok => self.reply_simple(c"OK"),
            Reply::Parked | Reply::Written => {}
        }
    }

    pub fn reply_int(&self, n: i64) {
        // SAFETY: a live context with a client to answer.
        unsafe { api!(RedisModule_ReplyWithLongLong)(self.raw(), n) };
    }

    pub fn reply_null(&self) {
        // SAFETY: as above.
        unsafe { api!(RedisModule_ReplyWithNull)(self.raw()) };
    }

    pub fn reply_simple(&self, s: &CStr) {
        // SAFETY: as above; `s` is NUL-terminated.
        unsafe { api!(RedisModule_ReplyWithSimpleString)(self.raw(), s.as_ptr()) };
    }

    pub fn reply_bulk(&self, b: &[u8]) {
        // SAFETY: as above; Redis copies `b`.
        unsafe {
            api!(RedisModule_ReplyWithStringBuffer)(
                self.raw(),
                b.as_ptr().cast::<c_char>(),
                b.len(),
            )
        };
    }

    /// An array of `n` elements; the next `n` replies are its elements.
    pub fn reply_array(&self, n: usize) {
        // SAFETY: as above.
        unsafe { api!(RedisModule_ReplyWithArray)(self.raw(), n as c_long) };
    }

    /// A map of `n` pairs (a flat array of 2n in RESP2); the next 2n replies are its fields
    /// and values.
    pub fn reply_map(&self, n: usize) {
        // SAFETY: as above.
        unsafe { api!(RedisModule_ReplyWithMap)(self.raw(), n as c_long) };
    }

    pub fn reply_error_c(&self, e: &CStr) {
        // SAFETY: as above; `e` is NUL-terminated.
        unsafe { api!(RedisModule_ReplyWithError)(self.raw(), e.as_ptr()) };
    }

    pub fn reply_error(&self, e: &ReplyError) {
        match CString::new(e.0.as_bytes()) {
            Ok(c) => self.reply_error_c(&c),
            Err(_) => self.reply_error_c(FALLBACK),
        }
    }
}
