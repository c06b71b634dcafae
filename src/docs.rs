//! COMMAND DOCS for every command (summary, complexity, arity), through
//! `RedisModule_SetCommandInfo` where the server has it (Redis 7.0+, Valkey); skipped with a
//! log line where it does not. Key specs come from the first/last/step given at registration.

use std::ffi::CString;

use redis_module::{raw, Context};

/// (command, summary, complexity, arity; negative: at least).
const DOCS: &[(&str, &str, &str, i32)] = &[
    ("rwlock.rlock", "Takes a shared read hold with its own lease; waits in FIFO order with WAIT.", "O(log N) where N is the number of holders of the key", -4),
    ("rwlock.wlock", "Takes the exclusive write hold with its own lease; waits in FIFO order with WAIT.", "O(log N) where N is the number of holders of the key", -4),
    ("rwlock.unlock", "Releases one hold of an owner (its write hold first) and hands the lock to the next waiters.", "O(log N + M) where M is the number of waiters granted", 3),
    ("rwlock.renew", "Makes every hold of an owner last ttl from now.", "O(log N)", 4),
    ("rwlock.info", "Shows the mode, holders, waiters and last token of a lock.", "O(N) where N is the number of holders", 2),
    ("leader.campaign", "Becomes (or stays) leader of an election; waits in FIFO order with WAIT.", "O(log N) where N is the number of waiting candidates", -4),
    ("leader.renew", "Makes the leader's lease last ttl from now.", "O(1)", 4),
    ("leader.resign", "Steps down as leader and hands leadership to the first waiting candidate.", "O(log N)", 3),
    ("leader.current", "Shows the leader, its term and the ms left of its lease.", "O(1)", 2),
    ("lease.apply", "Internal: applies the effects a master decided (replication and AOF only).", "O(N) where N is the number of effects", -3),
];

pub fn init(ctx: &Context) {
    let apis = unsafe { (raw::RedisModule_GetCommand, raw::RedisModule_SetCommandInfo) };
    let (Some(get), Some(set)) = apis else {
        ctx.log_notice(
            "lease: this server has no RedisModule_SetCommandInfo; COMMAND DOCS stays empty",
        );
        return;
    };
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let since = CString::new(env!("CARGO_PKG_VERSION")).expect("no nul");
    for (name, summary, complexity, arity) in DOCS {
        let name_c = CString::new(*name).expect("no nul");
        let summary = CString::new(*summary).expect("no nul");
        let complexity = CString::new(*complexity).expect("no nul");
        let info = raw::RedisModuleCommandInfo {
            version: &version,
            summary: summary.as_ptr(),
            complexity: complexity.as_ptr(),
            since: since.as_ptr(),
            history: std::ptr::null_mut(),
            tips: std::ptr::null(),
            arity: *arity,
            key_specs: std::ptr::null_mut(),
            args: std::ptr::null_mut(),
        };
        unsafe {
            let cmd = get(ctx.ctx, name_c.as_ptr());
            if cmd.is_null() || set(cmd, &info) != raw::REDISMODULE_OK as i32 {
                ctx.log_notice(&format!("lease: could not set COMMAND DOCS of {name}"));
            }
        }
    }
}
