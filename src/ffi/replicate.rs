//! Replication and the AOF: `LEASE.APPLY key kind op...` with as few allocations as the hot
//! path allows (the key and owner are the command's own strings, the fixed words are created
//! once), or the command itself where it is its own deterministic effect.

use std::sync::OnceLock;

use smallvec::SmallVec;

use redis_lease_core::{Effect, Id};
use redis_module::raw;

use super::api;
use super::ctx::Ctx;
use super::string::{RStr, RString};
use crate::num::saturating_i64;
use crate::wire::{encode, encode_records, Arg, Record, Word};

/// The fixed words as Redis strings (their addresses), created once and kept for the life of
/// the process. A static, so leak checkers see them as reachable.
static WORDS: OnceLock<[usize; Word::ALL.len()]> = OnceLock::new();

fn word(w: Word) -> *mut raw::RedisModuleString {
    let words = WORDS.get_or_init(|| {
        Word::ALL.map(|w| RString::from_bytes(w.as_str().as_bytes()).leak() as usize)
    });
    words[w.index()] as *mut raw::RedisModuleString
}

/// The request's own owner: its argument and the id made from it.
#[derive(Clone, Copy)]
pub struct Owner<'a> {
    pub arg: RStr<'a>,
    pub id: &'a Id,
}

/// Replicates `effects` on `key` (of kind `kind`). `owner`'s argument is reused for effects
/// that name its id instead of copying it.
pub fn effects(ctx: &Ctx, key: RStr, kind: Word, owner: Option<Owner>, effects: &[Effect]) {
    // On the stack for the common case (one or two effects): no allocation of our own.
    let mut args: SmallVec<[*mut raw::RedisModuleString; 16]> = SmallVec::new();
    // Strings made here, freed once Redis has taken its own references.
    let mut made: SmallVec<[RString; 4]> = SmallVec::new();
    args.push(key.raw());
    args.push(word(kind));
    encode(effects, |a| {
        let s = match a {
            Arg::Word(w) => word(w),
            Arg::Id(id) => match owner.filter(|o| o.id == id) {
                Some(o) => o.arg.raw(),
                None => {
                    made.push(RString::from_bytes(&id.bytes()));
                    made.last()
                        .map_or(std::ptr::null_mut(), |s| s.as_str().raw())
                }
            },
            Arg::Num(n) => {
                made.push(RString::from_i64(saturating_i64(n)));
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

/// Replicates `LEASE.APPLY key kind records...`: records about a name, or the server (an
/// eviction's hold-back, the token high-water mark).
pub fn records(ctx: &Ctx, key: RStr, kind: Word, records: &[Record]) {
    let mut args: SmallVec<[*mut raw::RedisModuleString; 4]> = SmallVec::new();
    let mut made: SmallVec<[RString; 2]> = SmallVec::new();
    args.push(key.raw());
    args.push(word(kind));
    encode_records(records, |a| {
        let s = match a {
            Arg::Word(w) => word(w),
            Arg::Num(n) => {
                made.push(RString::from_i64(saturating_i64(n)));
                made.last()
                    .map_or(std::ptr::null_mut(), |s| s.as_str().raw())
            }
            Arg::Id(id) => {
                made.push(RString::from_bytes(&id.bytes()));
                made.last()
                    .map_or(std::ptr::null_mut(), |s| s.as_str().raw())
            }
        };
        args.push(s);
    });
    // SAFETY: live strings; Redis takes its own references ("v").
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
