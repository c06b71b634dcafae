//! `LEASE.APPLY key kind op...`: the effects a master decided, as replicas and the AOF see
//! them. Deterministic: absolute deadlines and tokens, applied without reading the clock or
//! the queue. Accepted only from a master's replication stream or while loading the AOF.
//!
//! Ops: `GRANT owner read|write deadline token`, `RELEASE owner`, `DROP owner lapse|resign`,
//! `RENEW owner deadline`, and for AOF rewrites `HOLD owner reads writes deadline token` (a
//! holder exactly as it is), `LAST token` (the key's last token) and `HIGH token` (the
//! server-wide token high-water mark, so that an AOF without an RDB preamble keeps it too).

use redis_lease_core::{DropReason, Effect, Election, Hold, Mode, RwLock};
use redis_module::{Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::commit::{commit, Place};
use crate::key::{Found, Key, WRONGTYPE};
use crate::types::LeaseValue;
use crate::{guard, parse, state};

#[derive(Debug, PartialEq)]
pub enum Op {
    Effect(Effect),
    Hold(Box<[u8]>, Hold),
    Last(u64),
    High(u64),
}

fn bad(what: &str) -> String {
    format!("ERR LEASE.APPLY: {what}")
}

fn number(arg: Option<&&[u8]>, what: &str) -> Result<u64, String> {
    arg.and_then(|a| parse::integer(a))
        .filter(|n| *n >= 0)
        .map(|n| n as u64)
        .ok_or_else(|| bad(&format!("{what} must be an integer >= 0")))
}

fn owner(arg: Option<&&[u8]>) -> Result<Box<[u8]>, String> {
    match arg {
        Some(a) if !a.is_empty() => Ok((*a).into()),
        _ => Err(bad("missing or empty owner")),
    }
}

/// One argument of `LEASE.APPLY` as a master writes it.
pub enum Arg<'a> {
    Word(&'static str),
    Bytes(&'a [u8]),
    Num(u64),
}

/// Writes `effects` as `LEASE.APPLY` arguments (after the key and kind): the one spelling of
/// the wire format, read back by [`parse_ops`].
pub fn encode<'a>(effects: &'a [Effect], mut out: impl FnMut(Arg<'a>)) {
    for e in effects {
        match e {
            Effect::Grant {
                owner,
                mode,
                deadline,
                token,
            } => {
                out(Arg::Word("GRANT"));
                out(Arg::Bytes(owner));
                out(Arg::Word(mode.as_str()));
                out(Arg::Num(*deadline));
                out(Arg::Num(*token));
            }
            Effect::Release { owner } => {
                out(Arg::Word("RELEASE"));
                out(Arg::Bytes(owner));
            }
            Effect::Drop { owner, reason } => {
                out(Arg::Word("DROP"));
                out(Arg::Bytes(owner));
                out(Arg::Word(match reason {
                    DropReason::Lapse => "lapse",
                    DropReason::Resign => "resign",
                }));
            }
            Effect::Renew { owner, deadline } => {
                out(Arg::Word("RENEW"));
                out(Arg::Bytes(owner));
                out(Arg::Num(*deadline));
            }
        }
    }
}

/// Parses every op first, so that a bad one changes nothing.
pub fn parse_ops(args: &[&[u8]]) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let op = args[i].to_ascii_uppercase();
        let a = |k: usize| args.get(i + k);
        let (parsed, used) = match op.as_slice() {
            b"GRANT" => {
                let mode = match a(2).map(|m| m.to_ascii_lowercase()) {
                    Some(m) if m == b"read" => Mode::Read,
                    Some(m) if m == b"write" => Mode::Write,
                    _ => return Err(bad("mode must be read or write")),
                };
                let effect = Effect::Grant {
                    owner: owner(a(1))?,
                    mode,
                    deadline: number(a(3), "deadline")?,
                    token: number(a(4), "token")?,
                };
                (Op::Effect(effect), 5)
            }
            b"RELEASE" => (
                Op::Effect(Effect::Release {
                    owner: owner(a(1))?,
                }),
                2,
            ),
            b"DROP" => {
                let reason = match a(2).map(|r| r.to_ascii_lowercase()) {
                    Some(r) if r == b"lapse" => DropReason::Lapse,
                    Some(r) if r == b"resign" => DropReason::Resign,
                    _ => return Err(bad("reason must be lapse or resign")),
                };
                let effect = Effect::Drop {
                    owner: owner(a(1))?,
                    reason,
                };
                (Op::Effect(effect), 3)
            }
            b"RENEW" => {
                let effect = Effect::Renew {
                    owner: owner(a(1))?,
                    deadline: number(a(2), "deadline")?,
                };
                (Op::Effect(effect), 3)
            }
            b"HOLD" => {
                let count = |k, what| {
                    number(a(k), what).and_then(|n| u32::try_from(n).map_err(|_| bad(what)))
                };
                let hold = Hold {
                    reads: count(2, "reads")?,
                    writes: count(3, "writes")?,
                    deadline: number(a(4), "deadline")?,
                    token: number(a(5), "token")?,
                };
                (Op::Hold(owner(a(1))?, hold), 6)
            }
            b"LAST" => (Op::Last(number(a(1), "token")?), 2),
            b"HIGH" => (Op::High(number(a(1), "token")?), 2),
            _ => return Err(bad("unknown op")),
        };
        ops.push(parsed);
        i += used;
    }
    Ok(ops)
}

fn apply_to<V: LeaseValue>(ctx: &Context, name: &RedisString, ops: Vec<Op>) -> RedisResult {
    let key = Key::open_str(ctx.ctx, name).ok_or(RedisError::Str("ERR could not open the key"))?;
    let v = match key.get::<V>() {
        Found::Ours(v) => v,
        Found::Empty => key.create::<V>(),
        Found::WrongType => return Err(RedisError::Str(WRONGTYPE)),
    };
    let before = v.lock().holder_count();
    let mut effects = Vec::new();
    let mut tokens = state::with(|s| s.tokens);
    for op in ops {
        match op {
            Op::Effect(e) => {
                v.lock_mut().apply(&e, &mut tokens);
                effects.push(e);
            }
            Op::Hold(owner, hold) => {
                tokens.observe(hold.token);
                if hold.reads + hold.writes > 0 {
                    v.lock_mut().restore(&owner, hold);
                }
            }
            Op::Last(t) => {
                tokens.observe(t);
                v.lock_mut().observe_token(t);
            }
            Op::High(t) => tokens.observe(t),
        }
    }
    state::with(|s| s.tokens = tokens);
    let place = Place {
        ctx,
        key: &key,
        name,
        db: crate::commands::selected_db(ctx),

        owner: None,
    };
    let changes = redis_lease_core::Changes {
        effects,
        woken: Vec::new(),
    };
    commit(&place, v, changes, false, before);
    // Feed this server's own AOF (a replica's sub-replicas get the master's stream as is).
    ctx.replicate_verbatim();
    Ok(RedisValue::SimpleStringStatic("OK"))
}

pub fn apply(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        let from_master = ContextFlags::REPLICATED | ContextFlags::LOADING;
        if !ctx.get_flags().intersects(from_master) {
            return Err(RedisError::Str(
                "ERR LEASE.APPLY is internal: it is accepted only from a master or an AOF file",
            ));
        }
        if args.len() < 3 {
            return Err(RedisError::Str(
                "ERR wrong number of arguments for 'lease.apply' command",
            ));
        }
        let rest: Vec<&[u8]> = args[3..].iter().map(|a| a.as_slice()).collect();
        let ops = parse_ops(&rest).map_err(RedisError::String)?;
        match args[2].as_slice() {
            b"rwlock" => apply_to::<RwLock>(ctx, &args[1], ops),
            b"leader" => apply_to::<Election>(ctx, &args[1], ops),
            _ => Err(RedisError::Str(
                "ERR LEASE.APPLY: kind must be rwlock or leader",
            )),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_master_encodes_a_replica_parses_back() {
        let effects = vec![
            Effect::Grant {
                owner: b"a".to_vec().into(),
                mode: Mode::Read,
                deadline: 10,
                token: 7,
            },
            Effect::Release {
                owner: b"a".to_vec().into(),
            },
            Effect::Drop {
                owner: b"b".to_vec().into(),
                reason: DropReason::Lapse,
            },
            Effect::Renew {
                owner: b"c".to_vec().into(),
                deadline: 20,
            },
        ];
        let mut args: Vec<Vec<u8>> = Vec::new();
        encode(&effects, |a| {
            args.push(match a {
                Arg::Word(w) => w.as_bytes().to_vec(),
                Arg::Bytes(b) => b.to_vec(),
                Arg::Num(n) => n.to_string().into_bytes(),
            })
        });
        let text: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8(a.clone()).unwrap())
            .collect();
        assert_eq!(
            text.join(" "),
            "GRANT a read 10 7 RELEASE a DROP b lapse RENEW c 20"
        );
        let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
        let back: Vec<Effect> = parse_ops(&refs)
            .unwrap()
            .into_iter()
            .map(|op| match op {
                Op::Effect(e) => e,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(back, effects);
    }

    #[test]
    fn parses_every_op_and_rejects_bad_ones() {
        let args: Vec<&[u8]> =
            "GRANT a read 10 7 RELEASE a DROP b lapse RENEW c 20 HOLD d 2 1 30 9 LAST 11 HIGH 12"
                .split(' ')
                .map(str::as_bytes)
                .collect();
        let ops = parse_ops(&args).unwrap();
        assert_eq!(ops.len(), 7);
        assert_eq!(ops[5], Op::Last(11));
        assert_eq!(ops[6], Op::High(12));
        for bad in [
            "GRANT a read 10",
            "GRANT a sideways 10 7",
            "DROP b later",
            "RENEW c -1",
            "HOLD d 99999999999 0 1 1",
            "NOPE",
            "GRANT  read 10 7",
        ] {
            let args: Vec<&[u8]> = bad.split(' ').map(str::as_bytes).collect();
            assert!(parse_ops(&args).is_err(), "{bad}");
        }
    }
}
