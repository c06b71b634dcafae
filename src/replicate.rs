//! Replicating effects as `LEASE.APPLY key kind op...` with as few allocations as the hot path
//! allows: the key is the command's own string, the fixed words are created once, and each
//! owner and number is one Redis string.

use std::os::raw::c_char;
use std::sync::OnceLock;

use redis_lease_core::Effect;
use redis_module::{raw, Context, RedisString};

use crate::apply::{encode, Arg};

const WORDS: [&str; 10] = [
    "rwlock", "leader", "GRANT", "RELEASE", "DROP", "RENEW", "read", "write", "lapse", "resign",
];

/// The fixed words as Redis strings (their addresses), created once and kept for the life of
/// the process. A static, not a thread-local, so leak checkers see them as reachable.
static WORD_STRINGS: OnceLock<[usize; WORDS.len()]> = OnceLock::new();

fn word(w: &str) -> *mut raw::RedisModuleString {
    let strings = WORD_STRINGS.get_or_init(|| {
        WORDS.map(|w| unsafe {
            raw::RedisModule_CreateString.unwrap()(
                std::ptr::null_mut(),
                w.as_ptr() as *const c_char,
                w.len(),
            ) as usize
        })
    });
    let i = WORDS.iter().position(|x| *x == w).expect("a known word");
    strings[i] as *mut raw::RedisModuleString
}

/// Replicates `effects` on `name` (of kind `kind`: "rwlock" or "leader"). `owner` is the
/// request's own owner argument, reused for effects that name it instead of copying it.
pub fn effects(
    ctx: &Context,
    name: &RedisString,
    kind: &str,
    owner: Option<&RedisString>,
    effects: &[Effect],
) {
    let mut args: Vec<*mut raw::RedisModuleString> = Vec::with_capacity(2 + effects.len() * 5);
    // Strings this call creates, freed once Redis has taken its own references.
    let mut made: Vec<*mut raw::RedisModuleString> = Vec::with_capacity(effects.len() * 3);
    args.push(name.inner);
    args.push(word(kind));
    encode(effects, |a| {
        let s = match a {
            Arg::Word(w) => word(w),
            Arg::Bytes(b) if owner.is_some_and(|o| o.as_slice() == b) => {
                owner.map_or(std::ptr::null_mut(), |o| o.inner)
            }
            Arg::Bytes(b) => unsafe {
                let s = raw::RedisModule_CreateString.unwrap()(
                    std::ptr::null_mut(),
                    b.as_ptr() as *const c_char,
                    b.len(),
                );
                made.push(s);
                s
            },
            Arg::Num(n) => unsafe {
                let s = raw::RedisModule_CreateStringFromLongLong.unwrap()(
                    std::ptr::null_mut(),
                    n.min(i64::MAX as u64) as i64,
                );
                made.push(s);
                s
            },
        };
        args.push(s);
    });
    unsafe {
        raw::RedisModule_Replicate.unwrap()(
            ctx.ctx,
            c"LEASE.APPLY".as_ptr(),
            c"v".as_ptr(),
            args.as_ptr(),
            args.len(),
        );
        for s in made {
            raw::RedisModule_FreeString.unwrap()(std::ptr::null_mut(), s);
        }
    }
}
