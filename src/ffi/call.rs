//! Running another command from inside one (`LEASE.EXEC`), through `RedisModule_Call`.

use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};
use std::ptr::NonNull;

use redis_module::raw;

use super::api;
use super::ctx::Ctx;
use super::string::RStr;

/// A command's reply, owned; freed when dropped.
pub struct CallReply {
    raw: NonNull<raw::RedisModuleCallReply>,
}

impl Drop for CallReply {
    fn drop(&mut self) {
        // SAFETY: a reply RedisModule_Call returned, freed once, here.
        unsafe { api!(RedisModule_FreeCallReply)(self.raw.as_ptr()) }
    }
}

/// Why a command could not run (no reply object).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    UnknownCommand,
    /// Any other refusal Redis reported through errno (wrong arity, cluster rules...).
    Refused(c_int),
}

/// Runs `name args...` as the calling user (ACL applies), in script mode (commands a script
/// may not run are refused), respecting deny-oom, replicating its effects like any write,
/// answering in the caller's protocol, with errors as replies.
pub fn run_as_caller(
    ctx: &Ctx,
    name: &[u8],
    args: &[*mut raw::RedisModuleString],
) -> Result<CallReply, CallError> {
    let Ok(name) = CString::new(name) else {
        return Err(CallError::UnknownCommand);
    };
    let fmt: &CStr = c"vCSEM!0";
    // SAFETY: a live command context; "v" takes the argument strings of the running command
    // (Redis retains them for the call); the flags are documented RM_Call flags.
    let reply = unsafe {
        api!(RedisModule_Call)(
            ctx.raw(),
            name.as_ptr().cast::<c_char>(),
            fmt.as_ptr(),
            args.as_ptr(),
            args.len(),
        )
    };
    match NonNull::new(reply) {
        Some(raw) => Ok(CallReply { raw }),
        None => {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            if errno == libc::ENOENT {
                Err(CallError::UnknownCommand)
            } else {
                Err(CallError::Refused(errno))
            }
        }
    }
}

impl Ctx {
    /// Answers the running command with `reply`, as it came.
    pub fn reply_call(&self, reply: &CallReply) {
        // SAFETY: a live context and a live reply.
        unsafe { api!(RedisModule_ReplyWithCallReply)(self.raw(), reply.raw.as_ptr()) };
    }
}

/// The bytes of argument string `s`.
pub fn bytes_of<'a>(s: *mut raw::RedisModuleString) -> &'a [u8] {
    // SAFETY: an argument of the running command, live for its call.
    unsafe { RStr::from_raw(s) }.map_or(&[], |s| s.bytes())
}
