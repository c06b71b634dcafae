//! Commands: one table row per command (see `crate::table`) gives its registration, its
//! COMMAND DOCS, key specs and arity, and its ACL categories; [`run`] is the body of every
//! command's `extern "C"` entry.

use std::ffi::{CStr, CString};
use std::io::ErrorKind;
use std::os::raw::c_int;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use redis_module::raw;

use super::args::Args;
use super::ctx::{log_notice, log_warning, Ctx};
use super::reply::{Reply, ReplyError};
use super::{api, api_opt, guard};
use crate::syntax::{Arg, KeySpec, Keys};

pub type Handler = fn(&Ctx, &Args) -> Result<Reply, ReplyError>;

/// The types of a command's `extern "C"` entry, for the table's macro.
pub type RawCtx = raw::RedisModuleCtx;
pub type RawString = raw::RedisModuleString;

/// Whether a normal user may call a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reach {
    /// A public command: in the module's ACL category `@lease` where the server has it.
    Public,
    /// Only a master's stream or the AOF sends it: marked `internal` where the server knows
    /// the flag (Redis 8+, which hides it from other connections), in no category of users.
    Internal,
    /// For admins only (test builds' LEASE.FAULT): not in `@lease`, not hidden.
    #[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
    Admin,
}

/// One command.
pub struct Spec {
    pub name: &'static CStr,
    /// The `extern "C"` entry; made by the table's macro, it calls [`run`].
    pub func:
        extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int,
    pub flags: &'static CStr,
    /// As Redis counts it (from `args`): exactly n arguments (with the name), or at least -n.
    pub arity: i32,
    pub args: &'static [Arg],
    pub keys: &'static [KeySpec],
    /// The ACL categories, where the server lets modules set them (Redis 7.2+, Valkey);
    /// `@lease` is added to public commands where modules may add categories (Redis 7.4+).
    pub acl: &'static CStr,
    pub reach: Reach,
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
}

/// What this server let the module do with ACL categories (probed while loading).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AclSupport {
    /// `RedisModule_SetCommandACLCategories` set the commands' categories.
    pub categories: bool,
    /// `RedisModule_AddACLCategory` made `@lease`.
    pub module_category: bool,
}

static ACL_SUPPORT: OnceLock<AclSupport> = OnceLock::new();

/// What the server allowed (all false before the module loaded).
pub fn acl_support() -> AclSupport {
    ACL_SUPPORT.get().copied().unwrap_or_default()
}

/// The module's ACL category.
pub const CATEGORY: &CStr = c"lease";

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
    h: Handler,
) -> c_int {
    // SAFETY: Redis calls a command's function with its live context and arguments, valid
    // for the call.
    let Some(ctx) = (unsafe { Ctx::from_raw(ctx) }) else {
        return raw::REDISMODULE_ERR as c_int;
    };
    // SAFETY: as above.
    let args = unsafe { Args::from_raw(argv, argc) };
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

/// Makes the module's ACL category where the server allows it (Redis 7.4+, Valkey 9), and
/// records what the server supports; call once, while loading, before [`register`].
pub fn probe_acl(ctx: &Ctx) -> AclSupport {
    let categories = api_opt!(RedisModule_SetCommandACLCategories).is_some();
    let module_category = categories
        && api_opt!(RedisModule_AddACLCategory).is_some_and(|add| {
            // SAFETY: called from OnLoad with a static name.
            let ok = unsafe { add(ctx.raw(), CATEGORY.as_ptr()) } == raw::REDISMODULE_OK as i32;
            // EBUSY: it exists already (a category outlives the module that added it).
            let exists = !ok && std::io::Error::last_os_error().kind() == ErrorKind::ResourceBusy;
            if exists {
                log_notice("lease: the ACL category @lease exists already: using it");
            } else if !ok {
                log_warning("lease: could not add the ACL category @lease");
            }
            ok || exists
        });
    let support = AclSupport {
        categories,
        module_category,
    };
    let _ = ACL_SUPPORT.set(support);
    if !categories {
        log_notice(
            "lease: this server cannot give module commands ACL categories (Redis 7.2+ can): \
             grant the module's commands by name (README, \"ACL\")",
        );
    } else if !module_category {
        log_notice(
            "lease: this server cannot add the ACL category @lease (Redis 7.4+ can): the \
             commands are in @read / @write and the other built-in categories only",
        );
    }
    support
}

/// Registers every command of `table` (while the module loads), with COMMAND DOCS, key specs
/// and arity where the server has `RedisModule_SetCommandInfo`, and ACL categories as far as
/// [`probe_acl`] found them.
pub fn register(ctx: &Ctx, table: &[Spec]) -> Result<(), String> {
    let acl = acl_support();
    for spec in table {
        create(ctx, spec)?;
        let Some(get) = api_opt!(RedisModule_GetCommand) else {
            continue;
        };
        // SAFETY: the command was just created under this name.
        let cmd = unsafe { get(ctx.raw(), spec.name.as_ptr()) };
        if cmd.is_null() {
            return Err(format!("could not find {}", spec.name.to_string_lossy()));
        }
        let doc = super::docs::Doc {
            name: spec.name,
            arity: spec.arity,
            args: spec.args,
            keys: spec.keys,
            summary: spec.summary,
            complexity: spec.complexity,
        };
        super::docs::describe(cmd, &doc);
        if acl.categories {
            categorize(cmd, spec, acl.module_category)?;
        }
    }
    Ok(())
}

/// The legacy key range (first, last, step) of a command's key specs.
fn key_range(keys: &[KeySpec]) -> (c_int, c_int, c_int) {
    match keys {
        [KeySpec {
            keys: Keys::At(i), ..
        }] => (*i, *i, 1),
        _ => (0, 0, 0),
    }
}

fn create(ctx: &Ctx, spec: &Spec) -> Result<(), String> {
    let (first, last, step) = key_range(spec.keys);
    let try_flags = |flags: &CStr| {
        // SAFETY: called from OnLoad; every pointer is a static string or function.
        let rc = unsafe {
            api!(RedisModule_CreateCommand)(
                ctx.raw(),
                spec.name.as_ptr(),
                Some(spec.func),
                flags.as_ptr(),
                first,
                last,
                step,
            )
        };
        rc == raw::REDISMODULE_OK as i32
    };
    if spec.reach == Reach::Internal {
        // Servers that do not know the flag refuse it: the command is then made without it
        // (and refuses any client itself).
        let internal = CString::new(format!("{} internal", spec.flags.to_string_lossy()))
            .map_err(|e| e.to_string())?;
        if try_flags(&internal) {
            return Ok(());
        }
    }
    if try_flags(spec.flags) {
        Ok(())
    } else {
        Err(format!(
            "could not register {}",
            spec.name.to_string_lossy()
        ))
    }
}

fn categorize(
    cmd: *mut raw::RedisModuleCommand,
    spec: &Spec,
    module_category: bool,
) -> Result<(), String> {
    let Some(set) = api_opt!(RedisModule_SetCommandACLCategories) else {
        return Ok(());
    };
    let mut acl = spec.acl.to_string_lossy().into_owned();
    if module_category && spec.reach == Reach::Public {
        acl = format!("{acl} {}", CATEGORY.to_string_lossy());
    }
    let acl = CString::new(acl).map_err(|e| e.to_string())?;
    // SAFETY: a command of this module, while it loads; Redis parses the string at once.
    if unsafe { set(cmd, acl.as_ptr()) } != raw::REDISMODULE_OK as i32 {
        // Without its categories no user granted by category could call it: fail the load
        // rather than leave an operator guessing.
        return Err(format!(
            "could not set the ACL categories '{}' of {}",
            acl.to_string_lossy(),
            spec.name.to_string_lossy()
        ));
    }
    Ok(())
}
