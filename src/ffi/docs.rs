//! COMMAND DOCS and key specs in the C API's form (`RedisModule_SetCommandInfo`), written
//! from a command's syntax (`crate::syntax`) while the module loads.

use std::ffi::{CStr, CString};
use std::os::raw::c_int;

use redis_module::raw;

use super::api_opt;
use super::ctx::log_warning;
use crate::syntax::{Access, Arg, KeySpec, Keys, Shape};

/// `RedisModuleCommandArg`s (null-terminated arrays) for `args`, kept alive by `arena`.
fn raw_args(
    args: &[Arg],
    arena: &mut Vec<Vec<raw::RedisModuleCommandArg>>,
) -> *mut raw::RedisModuleCommandArg {
    let mut out: Vec<raw::RedisModuleCommandArg> = args
        .iter()
        .map(|a| {
            let (type_, key_spec_index, subargs) = match a.shape {
                Shape::Key { key_spec } => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
                    c_int::from(key_spec),
                    std::ptr::null_mut(),
                ),
                Shape::Text => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                    -1,
                    std::ptr::null_mut(),
                ),
                Shape::Integer => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
                    -1,
                    std::ptr::null_mut(),
                ),
                Shape::Token => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_PURE_TOKEN,
                    -1,
                    std::ptr::null_mut(),
                ),
                Shape::OneOf(subs) => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_ONEOF,
                    -1,
                    raw_args(subs, arena),
                ),
                Shape::Block(subs) => (
                    raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_BLOCK,
                    -1,
                    raw_args(subs, arena),
                ),
            };
            let mut flags = raw::REDISMODULE_CMD_ARG_NONE;
            if a.optional {
                flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
            }
            if a.multiple {
                flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
            }
            raw::RedisModuleCommandArg {
                name: a.name.as_ptr(),
                type_,
                key_spec_index,
                token: a.token.map_or(std::ptr::null(), CStr::as_ptr),
                summary: std::ptr::null(),
                since: std::ptr::null(),
                flags: flags as c_int,
                deprecated_since: std::ptr::null(),
                subargs,
                display_text: std::ptr::null(),
            }
        })
        .collect();
    out.push(raw::RedisModuleCommandArg {
        name: std::ptr::null(),
        type_: 0,
        key_spec_index: -1,
        token: std::ptr::null(),
        summary: std::ptr::null(),
        since: std::ptr::null(),
        flags: 0,
        deprecated_since: std::ptr::null(),
        subargs: std::ptr::null_mut(),
        display_text: std::ptr::null(),
    });
    // The Vec's buffer does not move when the Vec itself moves into the arena.
    let ptr = out.as_mut_ptr();
    arena.push(out);
    ptr
}

fn raw_key_spec(k: &KeySpec) -> raw::RedisModuleCommandKeySpec {
    let flags = match k.access {
        Access::Read => raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS,
        Access::ReadAndDeclared => {
            raw::REDISMODULE_CMD_KEY_RO
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_VARIABLE_FLAGS
        }
        Access::Write => {
            raw::REDISMODULE_CMD_KEY_RW
                | raw::REDISMODULE_CMD_KEY_ACCESS
                | raw::REDISMODULE_CMD_KEY_UPDATE
        }
    };
    let (pos, find_keys_type, fk) = match k.keys {
        Keys::At(i) => (
            i,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                range: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_1 {
                    lastkey: 0,
                    keystep: 1,
                    limit: 0,
                },
            },
        ),
        Keys::Numkeys(i) => (
            i,
            raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_KEYNUM,
            raw::RedisModuleCommandKeySpec__bindgen_ty_2 {
                keynum: raw::RedisModuleCommandKeySpec__bindgen_ty_2__bindgen_ty_2 {
                    keynumidx: 0,
                    firstkey: 1,
                    keystep: 1,
                },
            },
        ),
    };
    raw::RedisModuleCommandKeySpec {
        notes: std::ptr::null(),
        flags: u64::from(flags),
        begin_search_type: raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX,
        bs: raw::RedisModuleCommandKeySpec__bindgen_ty_1 {
            index: raw::RedisModuleCommandKeySpec__bindgen_ty_1__bindgen_ty_1 { pos },
        },
        find_keys_type,
        fk,
    }
}

/// What COMMAND DOCS shows of one command (from its table row).
pub struct Doc {
    pub name: &'static CStr,
    pub arity: i32,
    pub args: &'static [Arg],
    pub keys: &'static [KeySpec],
    pub summary: &'static CStr,
    pub complexity: &'static CStr,
}

/// COMMAND DOCS, key specs and arity, where the server has `RedisModule_SetCommandInfo`.
pub fn describe(cmd: *mut raw::RedisModuleCommand, spec: &Doc) {
    let Some(set) = api_opt!(RedisModule_SetCommandInfo) else {
        return;
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let since = CString::new(env!("CARGO_PKG_VERSION")).unwrap_or_default();
    let mut arena = Vec::new();
    let args = raw_args(spec.args, &mut arena);
    let mut keys: Vec<raw::RedisModuleCommandKeySpec> =
        spec.keys.iter().map(raw_key_spec).collect();
    // The terminator: begin_search_type 0 (INVALID).
    let mut end = raw_key_spec(&KeySpec {
        keys: Keys::At(0),
        access: Access::Read,
    });
    end.begin_search_type = 0;
    keys.push(end);
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary: spec.summary.as_ptr(),
        complexity: spec.complexity.as_ptr(),
        since: since.as_ptr(),
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: spec.arity,
        key_specs: keys.as_mut_ptr(),
        args,
    };
    // SAFETY: a command of this module, while it loads; every pointer lives until the call
    // returns, and Redis copies what it keeps.
    if unsafe { set(cmd, &info) } != raw::REDISMODULE_OK as i32 {
        log_warning(&format!(
            "lease: could not set COMMAND DOCS of {}",
            spec.name.to_string_lossy()
        ));
    }
}
