//! Replication and the AOF: `LEASE.APPLY key kind op...` with as few allocations as the hot
//! path allows (the key and owner are the command's own strings, the fixed words are created
//! once), or the command itself where it is its own deterministic effect.

use std::sync::OnceLock;

use smallvec::SmallVec;

use redis_lease_core::Effect;
use redis_module::raw;

use super::api;
use super::ctx::Ctx;
use super::string::{RStr, RString};
use crate::wire::{encode, Arg, Word};

/// The fixed words as Redis strings (their addresses), created once and kept for the life of
/// the process. A static, so leak checkers see them as reachable.
static WORDS: OnceLock<[usize; Word::ALL.len()]> = OnceLock::new();

fn word(w: Word) -> *mut raw::RedisModuleString {
    let words = WORDS.get_or_init(|| {
        Word::ALL.map(|w| RString::from_bytes(w.as_str().as_bytes()).leak() as usize)
    });
    words[w.index()] as *mut raw::RedisModuleString
}

/// Replicates `effects` on `key` (of kind `kind`). `owner` is the request's own owner
/// argument, reused for effects that name it instead of copying it.
pub fn effects(ctx: &Ctx, key: RStr, kind: Word, owner: Option<RStr>, effects: &[Effect]) {
    // On the stack for the common case (one or two effects): no allocation of our own.
    let mut args: SmallVec<[*mut raw::RedisModuleString; 16]> = SmallVec::new();
    // Strings made here, freed once Redis has taken its own references.
    let mut made: SmallVec<[RString; 4]> = SmallVec::new();
    args.push(key.raw());
    args.push(word(kind));
    encode(effects, |a| {
        let s = match a {
            Arg::Word(w) => word(w),
            Arg::Bytes(b) => match owner.filter(|o| o.bytes() == b) {
                Some(o) => o.raw(),
                None => {
                    made.push(RString::from_bytes(b));
                    made.last()
                        .map_or(std::ptr::null_mut(), |s| s.as_str().raw())
                }
            },
            Arg::Num(n) => {
                made.push(RString::from_i64(n.min(i64::MAX as u64) as i64));
                made.last()
                    .map_or(std::ptr::null_mut(), |s| s.as_str().raw())
            }
        };
        args.push(s);
    });
    // SAFETY: every element is a live Redis string; with the "v" format Redis takes its own
    // reference to each, so the ones made here may be freed right after.
    unsafe {
        api!(RedisModule_Replicate)(
            ctx.raw(),
            c"LEASE.APPLY".as_ptr(),
            c"v".as_ptr(),
            args.as_ptr(),
            args.len(),
        );
    }
    drop(made);
}

/// Replicates the running command as it was sent.
pub fn verbatim(ctx: &Ctx) {
    // SAFETY: a live command context.
    unsafe { api!(RedisModule_ReplicateVerbatim)(ctx.raw()) };
}
