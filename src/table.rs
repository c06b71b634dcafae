//! Every command, once: its registration (flags, key specs), its syntax (COMMAND DOCS, and
//! the arity Redis and the entry check), its ACL categories all come from this table. A new
//! command or option is one change here; the parser must accept what its syntax shows
//! (tests/docs.rs sends every documented form over the wire).

use std::os::raw::c_int;

use crate::commands::{exec, leader, multi, rwlock, semaphore};
use crate::ffi::command::{self, RawCtx, RawString, Reach, Spec};
use crate::syntax::{self, block, integer, key, one_of, text, word, Access, Arg, KeySpec, Keys};

macro_rules! spec {
    ($name:literal, $handler:path, $flags:literal, $args:expr, $keys:expr, $acl:literal, $reach:expr, $summary:literal, $complexity:literal) => {
        Spec {
            name: $name,
            func: {
                extern "C" fn entry(
                    ctx: *mut RawCtx,
                    argv: *mut *mut RawString,
                    argc: c_int,
                ) -> c_int {
                    const ARITY: i32 = syntax::arity($args);
                    command::run(ctx, argv, argc, ARITY, $handler)
                }
                entry
            },
            flags: $flags,
            arity: syntax::arity($args),
            args: $args,
            keys: $keys,
            acl: $acl,
            reach: $reach,
            summary: $summary,
            complexity: $complexity,
        }
    };
}

// The arguments every kind of key shares.
const KEY: Arg = key(c"key");
const OWNER: Arg = text(c"owner");
const CANDIDATE: Arg = text(c"candidate");
const TTL: Arg = integer(c"ttl");
const WAIT: Arg = integer(c"ms").token(c"WAIT").optional();
const MAXHOLD: Arg = integer(c"ms").token(c"MAXHOLD").optional();
const NUMKEYS: Arg = integer(c"numkeys");
const KEYS: Arg = key(c"key").multiple();

const LOCK: &[Arg] = &[KEY, OWNER, TTL, WAIT, MAXHOLD];
const MLOCK: &[Arg] = &[
    NUMKEYS,
    KEYS,
    OWNER,
    TTL,
    word(c"read", c"READ").optional(),
    WAIT,
    MAXHOLD,
];
const MHELD: &[Arg] = &[NUMKEYS, KEYS, OWNER];
const MRENEW: &[Arg] = &[NUMKEYS, KEYS, OWNER, TTL];
const HELD: &[Arg] = &[KEY, OWNER];
const RENEW: &[Arg] = &[KEY, OWNER, TTL];
const READ: &[Arg] = &[KEY];
const CAMPAIGN: &[Arg] = &[KEY, CANDIDATE, TTL, WAIT, MAXHOLD];
const LEADER_RENEW: &[Arg] = &[KEY, CANDIDATE, TTL];
const RESIGN: &[Arg] = &[KEY, CANDIDATE];
const ACQUIRE: &[Arg] = &[
    KEY,
    OWNER,
    integer(c"limit"),
    TTL,
    integer(c"n").token(c"PERMITS").optional(),
    WAIT,
    MAXHOLD,
];
const EXEC: &[Arg] = &[
    KEY,
    integer(c"token"),
    text(c"command"),
    text(c"arg").optional().multiple(),
];
/// `LEASE.APPLY`'s ops, as `crate::wire` writes and parses them.
const APPLY: &[Arg] = &[
    KEY,
    one_of(
        c"kind",
        &[
            word(c"rwlock", c"rwlock"),
            word(c"leader", c"leader"),
            word(c"semaphore", c"semaphore"),
        ],
    ),
    one_of(
        c"op",
        &[
            block(
                c"grant",
                &[
                    OWNER.token(c"GRANT"),
                    one_of(c"mode", &[word(c"read", c"read"), word(c"write", c"write")]),
                    integer(c"deadline"),
                    integer(c"token"),
                ],
            ),
            block(
                c"take",
                &[
                    OWNER.token(c"TAKE"),
                    integer(c"permits"),
                    integer(c"deadline"),
                    integer(c"token"),
                ],
            ),
            integer(c"limit").token(c"LIMIT"),
            OWNER.token(c"RELEASE"),
            block(
                c"drop",
                &[
                    OWNER.token(c"DROP"),
                    one_of(
                        c"reason",
                        &[word(c"lapse", c"lapse"), word(c"resign", c"resign")],
                    ),
                ],
            ),
            block(c"renew", &[OWNER.token(c"RENEW"), integer(c"deadline")]),
            block(
                c"hold",
                &[
                    OWNER.token(c"HOLD"),
                    integer(c"reads"),
                    integer(c"writes"),
                    integer(c"deadline"),
                    integer(c"token"),
                ],
            ),
            block(c"cap", &[OWNER.token(c"CAP"), integer(c"at")]),
            integer(c"token").token(c"LAST"),
            integer(c"token").token(c"HIGH"),
            integer(c"until").token(c"EVICTED"),
        ],
    )
    .optional()
    .multiple(),
];

/// The key at argument 1, changed or read.
const WRITES: &[KeySpec] = &[KeySpec {
    keys: Keys::At(1),
    access: Access::Write,
}];
/// `numkeys` at argument 1, the keys after it, each changed.
const MWRITES: &[KeySpec] = &[KeySpec {
    keys: Keys::Numkeys(1),
    access: Access::Write,
}];
const READS: &[KeySpec] = &[KeySpec {
    keys: Keys::At(1),
    access: Access::Read,
}];
const EXEC_KEYS: &[KeySpec] = &[KeySpec {
    keys: Keys::At(1),
    access: Access::ReadAndDeclared,
}];

use Reach::{Internal, Public};

// ACL categories as Redis gives its own commands: `write` or `read`, `fast` for those that
// never wait (else `slow`), `blocking` for those WAIT can park.
pub static COMMANDS: &[Spec] = &[
    spec!(c"rwlock.rlock", rwlock::rlock, c"write deny-oom", LOCK, WRITES, c"write slow blocking", Public,
        c"Takes a shared read hold with its own lease; waits in FIFO order with WAIT.",
        c"O(log N) where N is the number of holders of the key"),
    spec!(c"rwlock.wlock", rwlock::wlock, c"write deny-oom", LOCK, WRITES, c"write slow blocking", Public,
        c"Takes the exclusive write hold with its own lease; waits in FIFO order with WAIT.",
        c"O(log N) where N is the number of holders of the key"),
    spec!(c"rwlock.unlock", rwlock::unlock, c"write fast", HELD, WRITES, c"write fast", Public,
        c"Releases one hold of an owner (its write hold first) and hands the lock to the next waiters.",
        c"O(log N + M) where M is the number of waiters granted"),
    spec!(c"rwlock.renew", rwlock::renew, c"write fast", RENEW, WRITES, c"write fast", Public,
        c"Makes every hold of an owner last ttl from now.",
        c"O(log N)"),
    spec!(c"rwlock.info", rwlock::info, c"readonly fast", READ, READS, c"read fast", Public,
        c"Shows the mode, holders, queue (up to 100 waiters), waiters and last token of a lock.",
        c"O(N + M) where N is the number of holders and M the number of waiters (at most 100 shown)"),
    spec!(c"rwlock.mlock", multi::mlock, c"write deny-oom", MLOCK, MWRITES, c"write slow blocking", Public,
        c"Takes holds on several keys at once, all or nothing; waits in FIFO order on every key with WAIT.",
        c"O(K log N) where K is the number of keys"),
    spec!(c"rwlock.munlock", multi::munlock, c"write fast", MHELD, MWRITES, c"write fast", Public,
        c"Releases one hold of an owner on each of several keys.",
        c"O(K log N + M) where M is the number of waiters granted"),
    spec!(c"rwlock.mrenew", multi::mrenew, c"write fast", MRENEW, MWRITES, c"write fast", Public,
        c"Makes an owner's holds on several keys last ttl from now, or none of them past a hold's cap.",
        c"O(K log N)"),
    spec!(c"leader.campaign", leader::campaign, c"write deny-oom", CAMPAIGN, WRITES, c"write slow blocking", Public,
        c"Becomes (or stays) leader of an election; waits in FIFO order with WAIT.",
        c"O(log N) where N is the number of waiting candidates"),
    spec!(c"leader.renew", leader::renew, c"write fast", LEADER_RENEW, WRITES, c"write fast", Public,
        c"Makes the leader's lease last ttl from now.",
        c"O(1)"),
    spec!(c"leader.resign", leader::resign, c"write fast", RESIGN, WRITES, c"write fast", Public,
        c"Steps down as leader and hands leadership to the first waiting candidate.",
        c"O(log N)"),
    spec!(c"leader.current", leader::current, c"readonly fast", READ, READS, c"read fast", Public,
        c"Shows the leader, its term and the ms left of its lease.",
        c"O(1)"),
    spec!(c"leader.info", leader::info, c"readonly fast", READ, READS, c"read fast", Public,
        c"Shows the leader (candidate, term, ttl), the waiting candidates in queue order and their count.",
        c"O(N) where N is the number of waiting candidates (at most 100 shown)"),
    spec!(c"semaphore.acquire", semaphore::acquire_cmd, c"write deny-oom", ACQUIRE, WRITES, c"write slow blocking", Public,
        c"Takes permits of a counting semaphore with their own lease; waits in strict FIFO order with WAIT.",
        c"O(log N) where N is the number of holders of the key"),
    spec!(c"semaphore.release", semaphore::release, c"write fast", HELD, WRITES, c"write fast", Public,
        c"Releases every permit of an owner and hands them to the next waiters.",
        c"O(log N + M) where M is the number of waiters granted"),
    spec!(c"semaphore.renew", semaphore::renew, c"write fast", RENEW, WRITES, c"write fast", Public,
        c"Makes an owner's permits last ttl from now.",
        c"O(log N)"),
    spec!(c"semaphore.info", semaphore::info, c"readonly fast", READ, READS, c"read fast", Public,
        c"Shows the limit, permits used, holders, queue (up to 100 waiters), waiters and last token of a semaphore.",
        c"O(N + M) where N is the number of holders and M the number of waiters (at most 100 shown)"),
    // The lock key is only read; the keys of the command it runs are declared by its
    // getkeys-api (`commands::exec::declare_keys`), so Redis routes and checks them too.
    spec!(c"lease.exec", exec::exec, c"write getkeys-api", EXEC, EXEC_KEYS, c"write slow", Public,
        c"Runs a command only while the hold with the given token is live on the key, atomically with the check (a write fenced inside Redis).",
        c"O(1) plus the command's own complexity"),
    // As Redis's own replication commands: for admins only, and hidden where Redis can.
    spec!(c"lease.apply", crate::apply::apply, c"write", APPLY, WRITES, c"admin slow dangerous", Internal,
        c"Internal: applies the effects a master decided (replication and AOF only).",
        c"O(N) where N is the number of effects"),
];

/// Test-only commands (the `fault-injection` build).
#[cfg(feature = "fault-injection")]
static TESTING: &[Spec] = &[spec!(
    c"lease.fault",
    crate::commands::fault::fault,
    c"admin",
    &[text(c"point")],
    &[],
    c"admin slow dangerous",
    Reach::Admin,
    c"Test builds only: makes an entry point panic, to prove the guard holds.",
    c"O(1)"
)];
#[cfg(not(feature = "fault-injection"))]
static TESTING: &[Spec] = &[];

/// Registers every command.
pub fn register(ctx: &crate::ffi::ctx::Ctx) -> Result<(), String> {
    command::probe_acl(ctx);
    command::register(ctx, COMMANDS)?;
    command::register(ctx, TESTING)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONTRACT: &str = include_str!("../docs/COMMANDS.md");

    fn name(spec: &Spec) -> String {
        spec.name.to_string_lossy().into_owned()
    }

    fn words(c: &std::ffi::CStr) -> Vec<String> {
        c.to_string_lossy().split(' ').map(str::to_string).collect()
    }

    #[test]
    fn the_contract_shows_every_public_command_as_its_syntax_does() {
        for spec in COMMANDS.iter().filter(|s| s.reach == Reach::Public) {
            let usage = syntax::usage(&name(spec), spec.args);
            assert!(
                CONTRACT.contains(&format!("`{usage}`")),
                "docs/COMMANDS.md lacks `{usage}`"
            );
        }
    }

    #[test]
    fn the_contract_lists_each_command_s_acl_categories() {
        for spec in COMMANDS {
            let mut cats: Vec<String> = words(spec.acl).iter().map(|c| format!("@{c}")).collect();
            if spec.reach == Reach::Public {
                cats.push("@lease".into());
            }
            let row = format!("| `{}` | `{}` |", name(spec).to_uppercase(), cats.join(" "));
            assert!(CONTRACT.contains(&row), "docs/COMMANDS.md lacks {row}");
        }
    }

    /// As Redis gives its own commands categories from their flags.
    #[test]
    fn categories_agree_with_the_flags() {
        for spec in COMMANDS.iter().chain(TESTING) {
            let (flags, cats) = (words(spec.flags), words(spec.acl));
            let has = |c: &str| cats.iter().any(|x| x == c);
            let flag = |f: &str| flags.iter().any(|x| x == f);
            let n = name(spec);
            assert_eq!(flag("fast"), has("fast"), "{n}");
            assert_ne!(has("fast"), has("slow"), "{n}: fast or slow");
            if spec.reach == Reach::Public {
                assert_eq!(flag("write"), has("write"), "{n}");
                assert_eq!(flag("readonly"), has("read"), "{n}");
                let waits = spec.args.iter().any(|a| a.token == Some(c"WAIT"));
                assert_eq!(waits, has("blocking"), "{n}: blocking where WAIT can park");
            } else {
                assert!(has("admin") && has("dangerous") && !has("write"), "{n}");
            }
        }
    }

    /// LEASE.APPLY is sent by masters, not clients: its documented forms go to its parser
    /// here (the public commands' go over the wire in tests/docs.rs).
    #[test]
    fn every_documented_lease_apply_form_parses() {
        let apply = COMMANDS.iter().find(|s| name(s) == "lease.apply").unwrap();
        let value = |n: &str| match n {
            "key" => "k".to_string(),
            "owner" => "o".to_string(),
            _ => "1".to_string(),
        };
        let forms = syntax::forms(apply.args, &value);
        assert!(forms.len() > 10, "{forms:?}");
        for f in forms {
            let args: Vec<&[u8]> = f.iter().map(|a| a.as_bytes()).collect();
            assert!(crate::wire::kind(args[1]).is_some(), "{f:?}");
            let ops = crate::wire::parse_ops(&args[2..]);
            assert!(ops.is_ok(), "{f:?}: {ops:?}");
            let arity = apply.arity;
            assert!(args.len() + 1 >= arity.unsigned_abs() as usize, "{f:?}");
        }
    }

    #[test]
    fn arity_is_the_syntax_s() {
        let of = |n: &str| COMMANDS.iter().find(|s| name(s) == n).unwrap().arity;
        assert_eq!(of("rwlock.rlock"), -4);
        assert_eq!(of("rwlock.unlock"), 3);
        assert_eq!(of("rwlock.renew"), 4);
        assert_eq!(of("rwlock.info"), 2);
        assert_eq!(of("semaphore.acquire"), -5);
        assert_eq!(of("lease.exec"), -4);
        assert_eq!(of("lease.apply"), -3);
    }
}
