//! The getkeys-api: a command registered with the `getkeys-api` flag is called once more by
//! Redis (cluster routing, ACL key checks, `COMMAND GETKEYS`) with a special context, to
//! declare its keys instead of running. LEASE.EXEC declares its lock key and the keys of the
//! command it runs, so that Redis's own multi-key rules (CROSSSLOT, and TRYAGAIN while a slot
//! migrates with its keys split) apply to all of them.

use std::os::raw::c_int;

use redis_module::raw;

use super::ctx::Ctx;
use super::{api, api_opt};

/// How a declared key is used, as `REDISMODULE_CMD_KEY_*` flags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyFlags(pub c_int);

impl KeyFlags {
    /// Read only, its value read (the lock key of LEASE.EXEC: checked, never written).
    pub const READ: KeyFlags =
        KeyFlags((raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as c_int);
    /// Unknown use (a server without the flags API): declared without flags.
    pub const UNKNOWN: KeyFlags = KeyFlags(0);
}

impl Ctx {
    /// Whether this call only asks the command for its keys.
    pub fn keys_request(&self) -> bool {
        // SAFETY: a live command context; IsKeysPositionRequest exists since Redis 4.0.
        unsafe { api!(RedisModule_IsKeysPositionRequest)(self.raw()) != 0 }
    }

    /// Declares argument `pos` a key (in a keys request). With flags where the server has
    /// `RedisModule_KeyAtPosWithFlags` (Redis 7.0+), without them elsewhere.
    pub fn declare_key(&self, pos: usize, flags: KeyFlags) {
        let Ok(pos) = c_int::try_from(pos) else {
            return;
        };
        // SAFETY: a live keys-request context; `pos` indexes the command's own arguments.
        unsafe {
            match api_opt!(RedisModule_KeyAtPosWithFlags) {
                Some(f) => f(self.raw(), pos, flags.0),
                None => api!(RedisModule_KeyAtPos)(self.raw(), pos),
            }
        }
    }
}

/// The keys of the command `argv` (its name first): their positions in `argv` and their flags,
/// as Redis reads them from the command's key specs (or its own getkeys-api). `None` if Redis
/// cannot tell (unknown command, wrong arity) or the server lacks the API.
pub fn command_keys(
    ctx: &Ctx,
    argv: &[*mut raw::RedisModuleString],
) -> Option<Vec<(usize, KeyFlags)>> {
    let argc = c_int::try_from(argv.len()).ok()?;
    let mut n: c_int = 0;
    let mut flags: *mut c_int = std::ptr::null_mut();
    // SAFETY: a live context and the running command's own argument strings (Redis only reads
    // them); Redis returns arrays it allocated (positions, and flags where asked), freed here.
    unsafe {
        let p = if let Some(f) = api_opt!(RedisModule_GetCommandKeysWithFlags) {
            f(ctx.raw(), argv.as_ptr() as *mut _, argc, &mut n, &mut flags)
        } else {
            let f = api_opt!(RedisModule_GetCommandKeys)?;
            f(ctx.raw(), argv.as_ptr() as *mut _, argc, &mut n)
        };
        if p.is_null() {
            // Redis sets errno: 0 for a command without keys, ENOENT or EINVAL otherwise.
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return (errno == 0).then(Vec::new);
        }
        let len = usize::try_from(n).unwrap_or(0);
        let pos = std::slice::from_raw_parts(p, len);
        let fl = (!flags.is_null()).then(|| std::slice::from_raw_parts(flags, len));
        let out = pos
            .iter()
            .enumerate()
            .map(|(i, at)| {
                let f = fl.map_or(KeyFlags::UNKNOWN, |fl| KeyFlags(fl[i]));
                (usize::try_from(*at).unwrap_or(usize::MAX), f)
            })
            .collect();
        api!(RedisModule_Free)(p.cast());
        if !flags.is_null() {
            api!(RedisModule_Free)(flags.cast());
        }
        Some(out)
    }
}
