//! Every command, once: its registration (flags, key position 1), its COMMAND DOCS and its
//! arity all come from this table.

use std::os::raw::c_int;

use crate::commands::{exec, leader, rwlock, semaphore};
use crate::ffi::command::{self, RawCtx, RawString, Spec};

macro_rules! spec {
    ($name:literal, $handler:path, $flags:literal, $arity:literal, $acl:expr, $summary:literal, $complexity:literal) => {
        Spec {
            name: $name,
            func: {
                extern "C" fn entry(
                    ctx: *mut RawCtx,
                    argv: *mut *mut RawString,
                    argc: c_int,
                ) -> c_int {
                    command::run(ctx, argv, argc, $arity, $handler)
                }
                entry
            },
            flags: $flags,
            arity: $arity,
            acl: $acl,
            summary: $summary,
            complexity: $complexity,
        }
    };
}

/// The optional ACL category of requests that may wait.
const BLOCKING: Option<&std::ffi::CStr> = Some(c"blocking");

pub static COMMANDS: &[Spec] = &[
    spec!(c"rwlock.rlock", rwlock::rlock, c"write deny-oom", -4, BLOCKING,
        c"Takes a shared read hold with its own lease; waits in FIFO order with WAIT.",
        c"O(log N) where N is the number of holders of the key"),
    spec!(c"rwlock.wlock", rwlock::wlock, c"write deny-oom", -4, BLOCKING,
        c"Takes the exclusive write hold with its own lease; waits in FIFO order with WAIT.",
        c"O(log N) where N is the number of holders of the key"),
    spec!(c"rwlock.unlock", rwlock::unlock, c"write", 3, None,
        c"Releases one hold of an owner (its write hold first) and hands the lock to the next waiters.",
        c"O(log N + M) where M is the number of waiters granted"),
    spec!(c"rwlock.renew", rwlock::renew, c"write fast", 4, None,
        c"Makes every hold of an owner last ttl from now.",
        c"O(log N)"),
    spec!(c"rwlock.info", rwlock::info, c"readonly", 2, None,
        c"Shows the mode, holders, waiters and last token of a lock.",
        c"O(N) where N is the number of holders"),
    spec!(c"leader.campaign", leader::campaign, c"write deny-oom", -4, BLOCKING,
        c"Becomes (or stays) leader of an election; waits in FIFO order with WAIT.",
        c"O(log N) where N is the number of waiting candidates"),
    spec!(c"leader.renew", leader::renew, c"write fast", 4, None,
        c"Makes the leader's lease last ttl from now.",
        c"O(1)"),
    spec!(c"leader.resign", leader::resign, c"write fast", 3, None,
        c"Steps down as leader and hands leadership to the first waiting candidate.",
        c"O(log N)"),
    spec!(c"leader.current", leader::current, c"readonly fast", 2, None,
        c"Shows the leader, its term and the ms left of its lease.",
        c"O(1)"),
    spec!(c"semaphore.acquire", semaphore::acquire_cmd, c"write deny-oom", -5, BLOCKING,
        c"Takes permits of a counting semaphore with their own lease; waits in strict FIFO order with WAIT.",
        c"O(log N) where N is the number of holders of the key"),
    spec!(c"semaphore.release", semaphore::release, c"write", 3, None,
        c"Releases every permit of an owner and hands them to the next waiters.",
        c"O(log N + M) where M is the number of waiters granted"),
    spec!(c"semaphore.renew", semaphore::renew, c"write fast", 4, None,
        c"Makes an owner's permits last ttl from now.",
        c"O(log N)"),
    spec!(c"semaphore.info", semaphore::info, c"readonly", 2, None,
        c"Shows the limit, permits used, holders, waiters and last token of a semaphore.",
        c"O(N) where N is the number of holders"),
    spec!(c"lease.exec", exec::exec, c"write getkeys-api", -4, None,
        c"Runs a command only while the hold with the given token is live on the key, atomically with the check (a write fenced inside Redis).",
        c"O(1) plus the command's own complexity"),
    spec!(c"lease.apply", crate::apply::apply, c"write", -3, None,
        c"Internal: applies the effects a master decided (replication and AOF only).",
        c"O(N) where N is the number of effects"),
];

/// Test-only commands (the `fault-injection` build).
#[cfg(feature = "fault-injection")]
static TESTING: &[Spec] = &[spec!(
    c"lease.fault",
    crate::commands::fault::fault,
    c"admin",
    2,
    None,
    c"Test builds only: makes an entry point panic, to prove the guard holds.",
    c"O(1)"
)];
#[cfg(not(feature = "fault-injection"))]
static TESTING: &[Spec] = &[];

/// Registers every command.
pub fn register(ctx: &crate::ffi::ctx::Ctx) -> Result<(), String> {
    command::register(ctx, COMMANDS)?;
    command::register(ctx, TESTING)
}
