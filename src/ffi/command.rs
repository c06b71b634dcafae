//! Commands: one table row per command (see `crate::table`) gives its registration, its
//! COMMAND DOCS and its arity; [`run`] is the body of every command's `extern "C"` entry.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::raw;

use super::args::Args;
use super::ctx::{log_notice, log_warning, Ctx};
use super::reply::{Reply, ReplyError};
use super::{api, api_opt, guard};

pub type Handler = fn(&Ctx, &Args) -> Result<Reply, ReplyError>;

/// The types of a command's `extern "C"` entry, for the table's macro.
pub type RawCtx = raw::RedisModuleCtx;
pub type RawString = raw::RedisModuleString;

/// One command.
pub struct Spec {
    pub name: &'static CStr,
    /// The `extern "C"` entry; made by the table's macro, it calls [`run`].
    pub func:
        extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int,
    pub flags: &'static CStr,
    /// As Redis counts it: exactly n arguments (with the name), or at least -n.
    pub arity: i32,
    /// An ACL category to add where the server allows modules to (Redis 7.2+, Valkey).
    pub acl: Option<&'static CStr>,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
    /// `numkeys` at argument 1 and that many keys after it (else the key is argument 1):
    /// registered with `getkeys-api` and a key spec, so Cluster routing and COMMAND GETKEYS
    /// find every key.
    pub numkeys: bool,
}

/// Answers Redis's question "where are the keys?" for a `numkeys` command: every key from
/// argument 2 on, as many as argument 1 says (and the arguments allow).
fn report_keys(ctx: &Ctx, args: &Args) {
    let n = crate::parse::integer(args.bytes(1)).unwrap_or(0).max(0) as usize;
    let last = (2 + n).min(args.len());
    for pos in 2..last {
        // SAFETY: a live context in a keys-position request; `pos` is an argument index.
        unsafe { api!(RedisModule_KeyAtPos)(ctx.raw(), pos as c_int) };
    }
}

fn arity_ok(arity: i32, n: usize) -> bool {
    if arity >= 0 {
        n == arity as usize
    } else {
        n >= arity.unsigned_abs() as usize
    }
}

/// Runs a command handler under the panic guard: checks the arity, calls `h`, writes its
/// reply or error. A panic becomes an error reply and a warning in the log.
pub fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    arity: i32,
    numkeys: bool,
    h: Handler,
) -> c_int {
    // SAFETY: Redis calls a command's function with its live context and arguments, valid
    // for the call.
    let Some(ctx) = (unsafe { Ctx::from_raw(ctx) }) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    // SAFETY: as above.
    let args = unsafe { Args::from_raw(argv, argc) };
    // SAFETY: a live context. (Only `numkeys` commands are registered with `getkeys-api`.)
    if numkeys && unsafe { api!(RedisModule_IsKeysPositionRequest)(ctx.raw()) } != 0 {
        let _ = catch_unwind(AssertUnwindSafe(|| report_keys(&ctx, &args)));
        return raw::REDISMODULE_OK as c_int;
    }
    let out = catch_unwind(AssertUnwindSafe(|| {
        if cfg!(feature = "fault-injection") {
            let name = String::from_utf8_lossy(args.bytes(0)).to_lowercase();
            guard::injected(&format!("command {name}"));
        }
        if !arity_ok(arity, args.len()) {
            let name = crate::text::quoted(args.bytes(0)).to_lowercase();
            let e = format!("ERR wrong number of arguments for '{name}' command");
            return Err(ReplyError::from(e));
        }
        h(&ctx, &args)
    }));
    match out {
        Ok(Ok(r)) => ctx.reply(r),
        Ok(Err(e)) => ctx.reply_error(&e),
        Err(p) => {
            log_warning(&format!(
                "lease: a command handler panicked ({}); it answered an error",
                guard::panic_text(&*p)
            ));
            ctx.reply_error_c(guard::INTERNAL);
        }
    }
    raw::REDISMODULE_OK as c_int
}

/// Registers every command of `table` (while the module loads), with COMMAND DOCS where
/// the server has `RedisModule_SetCommandInfo`.
pub fn register(ctx: &Ctx, table: &[Spec]) -> Result<(), String> {
    for spec in table {
        // The key is argument 1 of every command but the `numkeys` ones (see `report_keys`).
        let (first, last) = if spec.numkeys { (0, 0) } else { (1, 1) };
        // SAFETY: called from OnLoad; every pointer is a static string or function.
        let rc = unsafe {
            api!(RedisModule_CreateCommand)(
                ctx.raw(),
                spec.name.as_ptr(),
                Some(spec.func),
                spec.flags.as_ptr(),
                first,
                last,
                first,
            )
        };
        if rc != raw::REDISMODULE_OK as i32 {
            return Err(format!(
                "could not register {}",
                spec.name.to_string_lossy()
            ));
        }
        describe(ctx, spec);
    }
    Ok(())
}

fn describe(ctx: &Ctx, spec: &Spec) {
    let (Some(get), Some(set)) = (
        api_opt!(RedisModule_GetCommand),
        api_opt!(RedisModule_SetCommandInfo),
    ) else {
        return;
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let since = CString::new(env!("CARGO_PKG_VERSION")).unwrap_or_default();
    // numkeys at argument 1, the keys from argument 2; a zeroed spec ends the list.
    // SAFETY: the key spec is plain C data; all zeroes is its "end of list" value.
    let mut specs: [raw::RedisModuleCommandKeySpec; 2] = unsafe { std::mem::zeroed() };
    specs[0].flags = u64::from(raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_UPDATE);
    specs[0].begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    specs[0].bs.index.pos = 2;
    specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM;
    specs[0].fk.keynum = raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
        keynumidx: 0,
        firstkey: 1,
        keystep: 1,
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: spec.summary.as_ptr(),
        complexity: spec.complexity.as_ptr(),
        since: since.as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: spec.arity,
        key_specs: if spec.numkeys {
            specs.as_mut_ptr()
        } else {
            std::ptr::null_mut()
        },
        args: std::ptr::null_mut(),
    };
    // SAFETY: the command was just created; Redis copies the info it keeps.
    unsafe {
        let cmd = get(ctx.raw(), spec.name.as_ptr());
        if cmd.is_null() || set(cmd, &info) != raw::REDISMODULE_OK as i32 {
            log_notice(&format!(
                "lease: could not set COMMAND DOCS of {}",
                spec.name.to_string_lossy()
            ));
            return;
        }
        if let (Some(acl), Some(set_acl)) =
            (spec.acl, api_opt!(RedisModule_SetCommandACLCategories))
        {
            set_acl(cmd, acl.as_ptr());
        }
    }
}
