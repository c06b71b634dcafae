//! The `LEASE.APPLY key kind op...` format: the effects a master decided, as replicas and the
//! AOF see them. Deterministic: absolute deadlines and explicit tokens.
//!
//! Ops: `GRANT owner read|write deadline token`, `TAKE owner permits deadline token`,
//! `LIMIT n`, `RELEASE owner`, `DROP owner lapse|resign`, `RENEW owner deadline`, `CAP owner
//! at` (the hold may not be renewed past `at`: after a grant with a max hold, and after an
//! AOF rewrite's `HOLD` of a capped holder); and for AOF
//! rewrites `HOLD owner reads writes deadline token` (a holder exactly as it is), `LAST token`
//! (the key's last token) and `HIGH token` (the server-wide token high-water mark, so that an
//! AOF without an RDB preamble keeps it too); and `EVICTED until` (the key was evicted while
//! its leases ran: new grants on its name wait until then). Pure: encoding and parsing are tested here, the
//! C API layer only turns [`Arg`]s into Redis strings.

use redis_lease_core::{DropReason, Effect, Hold, Id, Kind, Lock, Mode};

use crate::parse;
use crate::validate::{DEADLINE_CEILING, TOKEN_CEILING};

/// Every fixed word of the format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Word {
    RwLock,
    Leader,
    Semaphore,
    Grant,
    Take,
    Limit,
    Release,
    Drop,
    Renew,
    Read,
    Write,
    Lapse,
    Resign,
    Evicted,
    Hold,
    Last,
    High,
    Cap,
}

impl Word {
    pub const ALL: [Word; 18] = [
        Word::RwLock,
        Word::Leader,
        Word::Semaphore,
        Word::Grant,
        Word::Take,
        Word::Limit,
        Word::Release,
        Word::Drop,
        Word::Renew,
        Word::Read,
        Word::Write,
        Word::Lapse,
        Word::Resign,
        Word::Evicted,
        Word::Hold,
        Word::Last,
        Word::High,
        Word::Cap,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Word::RwLock => "rwlock",
            Word::Leader => "leader",
            Word::Semaphore => "semaphore",
            Word::Grant => "GRANT",
            Word::Take => "TAKE",
            Word::Limit => "LIMIT",
            Word::Release => "RELEASE",
            Word::Drop => "DROP",
            Word::Renew => "RENEW",
            Word::Read => "read",
            Word::Write => "write",
            Word::Lapse => "lapse",
            Word::Resign => "resign",
            Word::Evicted => "EVICTED",
            Word::Hold => "HOLD",
            Word::Last => "LAST",
            Word::High => "HIGH",
            Word::Cap => "CAP",
        }
    }

    /// The position of the word in [`Word::ALL`] (for tables indexed by word).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The word naming a kind of key.
    pub fn of_kind(kind: Kind) -> Word {
        match kind {
            Kind::RwLock => Word::RwLock,
            Kind::Election => Word::Leader,
            Kind::Semaphore => Word::Semaphore,
        }
    }

    /// The op an argument names (ops are upper-case words; matched in any case).
    fn op(arg: &[u8]) -> Option<Word> {
        const OPS: [Word; 11] = [
            Word::Grant,
            Word::Take,
            Word::Limit,
            Word::Release,
            Word::Drop,
            Word::Renew,
            Word::Hold,
            Word::Last,
            Word::High,
            Word::Evicted,
            Word::Cap,
        ];
        OPS.into_iter()
            .find(|w| w.as_str().as_bytes().eq_ignore_ascii_case(arg))
    }

    fn of_mode(mode: Mode) -> Word {
        match mode {
            Mode::Read => Word::Read,
            Mode::Write => Word::Write,
        }
    }
}

/// The kind a `LEASE.APPLY` names.
pub fn kind(word: &[u8]) -> Option<Kind> {
    match word {
        b"rwlock" => Some(Kind::RwLock),
        b"leader" => Some(Kind::Election),
        b"semaphore" => Some(Kind::Semaphore),
        _ => None,
    }
}

/// One argument of `LEASE.APPLY` as a master writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arg<'a> {
    Word(Word),
    /// An owner, written as its bytes.
    Id(&'a Id),
    Num(u64),
}

/// Writes `effects` as `LEASE.APPLY` arguments (after the key and kind): the one spelling of
/// the format, read back by [`parse_ops`].
pub fn encode<'a>(effects: &'a [Effect], mut out: impl FnMut(Arg<'a>)) {
    for e in effects {
        encode_effect(e, &mut out);
    }
}

/// A record that is not an effect: what an AOF rewrite writes to rebuild a key as it is, and
/// an eviction's hold-back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// `HOLD owner reads writes deadline token`
    Hold(&'a Id, Hold),
    /// `LAST token`: the key's last token.
    Last(u64),
    /// `HIGH token`: the server-wide token high-water mark.
    High(u64),
    /// `LIMIT n`: a semaphore's limit.
    Limit(u32),
    /// `EVICTED until`
    Evicted(u64),
}

/// Writes `records` as `LEASE.APPLY` arguments (after the key and kind).
pub fn encode_records<'a>(records: &[Record<'a>], mut out: impl FnMut(Arg<'a>)) {
    for r in records {
        match *r {
            Record::Hold(owner, h) => {
                out(Arg::Word(Word::Hold));
                out(Arg::Id(owner));
                out(Arg::Num(h.reads.into()));
                out(Arg::Num(h.writes.into()));
                out(Arg::Num(h.deadline));
                out(Arg::Num(h.token));
                if h.cap != 0 {
                    // The hold's cap, right after it (HOLD has no room for it).
                    out(Arg::Word(Word::Cap));
                    out(Arg::Id(owner));
                    out(Arg::Num(h.cap));
                }
            }
            Record::Last(t) => {
                out(Arg::Word(Word::Last));
                out(Arg::Num(t));
            }
            Record::High(t) => {
                out(Arg::Word(Word::High));
                out(Arg::Num(t));
            }
            Record::Limit(n) => {
                out(Arg::Word(Word::Limit));
                out(Arg::Num(n.into()));
            }
            Record::Evicted(until) => {
                out(Arg::Word(Word::Evicted));
                out(Arg::Num(until));
            }
        }
    }
}

/// The name a server-wide record (`HIGH` alone) is written under: it makes no key.
pub const HIGH_KEY: &[u8] = b"lease:high";

/// Holders per `LEASE.APPLY` command of an AOF rewrite (as Redis batches big values).
pub const HOLDS_PER_COMMAND: usize = 64;

/// The `LEASE.APPLY` commands (their records) that rebuild a key as it is: the key's last
/// token, the server-wide high-water mark `high` (so an AOF without an RDB preamble keeps it
/// as long as one key exists), a semaphore's limit, and the holders, in commands of at most
/// [`HOLDS_PER_COMMAND`] holders. The first command carries the first holders too, so the key
/// it makes is never empty (an empty key is deleted at once, and LAST would be lost with it).
pub fn rewrite(kind: Kind, lock: &Lock, high: u64) -> Vec<Vec<Record<'_>>> {
    let mut first = vec![Record::Last(lock.last_token()), Record::High(high)];
    if kind == Kind::Semaphore {
        first.push(Record::Limit(lock.limit()));
    }
    let mut out = vec![first];
    let holders: Vec<_> = lock.holders().collect();
    for (i, chunk) in holders.chunks(HOLDS_PER_COMMAND).enumerate() {
        if i > 0 {
            out.push(Vec::new());
        }
        if let Some(cmd) = out.last_mut() {
            cmd.extend(chunk.iter().map(|h| Record::Hold(h.owner, h.hold)));
        }
    }
    out
}

fn encode_effect<'a>(e: &'a Effect, out: &mut impl FnMut(Arg<'a>)) {
    {
        match e {
            Effect::Grant {
                owner,
                mode,
                deadline,
                token,
            } => {
                out(Arg::Word(Word::Grant));
                out(Arg::Id(owner));
                out(Arg::Word(Word::of_mode(*mode)));
                out(Arg::Num(*deadline));
                out(Arg::Num(*token));
            }
            Effect::Take {
                owner,
                permits,
                deadline,
                token,
            } => {
                out(Arg::Word(Word::Take));
                out(Arg::Id(owner));
                out(Arg::Num((*permits).into()));
                out(Arg::Num(*deadline));
                out(Arg::Num(*token));
            }
            Effect::Limit { limit } => {
                out(Arg::Word(Word::Limit));
                out(Arg::Num((*limit).into()));
            }
            Effect::Release { owner } => {
                out(Arg::Word(Word::Release));
                out(Arg::Id(owner));
            }
            Effect::Drop { owner, reason } => {
                out(Arg::Word(Word::Drop));
                out(Arg::Id(owner));
                out(Arg::Word(match reason {
                    DropReason::Lapse => Word::Lapse,
                    DropReason::Resign => Word::Resign,
                }));
            }
            Effect::Renew { owner, deadline } => {
                out(Arg::Word(Word::Renew));
                out(Arg::Id(owner));
                out(Arg::Num(*deadline));
            }
            Effect::Cap { owner, at } => {
                out(Arg::Word(Word::Cap));
                out(Arg::Id(owner));
                out(Arg::Num(*at));
            }
        }
    }
}

/// One parsed op.
#[derive(Debug, PartialEq)]
pub enum Op {
    Effect(Effect),
    Hold(Id, Hold),
    Last(u64),
    High(u64),
    /// The key was evicted while its leases ran until this time: new grants on its name are
    /// held back until then.
    Evicted(u64),
}

fn bad(what: &str) -> String {
    format!("ERR LEASE.APPLY: {what}")
}

fn number(arg: Option<&&[u8]>, what: &str, max: u64) -> Result<u64, String> {
    arg.and_then(|a| parse::integer(a))
        .filter(|n| *n >= 0 && *n as u64 <= max)
        .map(|n| n as u64)
        .ok_or_else(|| bad(&format!("{what} must be an integer from 0 to {max}")))
}

fn count(arg: Option<&&[u8]>, what: &str) -> Result<u32, String> {
    number(arg, what, u32::MAX.into()).map(|n| n as u32)
}

fn owner(arg: Option<&&[u8]>) -> Result<Id, String> {
    match arg {
        Some(a) if !a.is_empty() => Ok(Id::new(a)),
        _ => Err(bad("missing or empty owner")),
    }
}

fn token(arg: Option<&&[u8]>) -> Result<u64, String> {
    number(arg, "token", TOKEN_CEILING)
}

fn deadline(arg: Option<&&[u8]>) -> Result<u64, String> {
    number(arg, "deadline", DEADLINE_CEILING)
}

/// Parses every op first, so that a bad one changes nothing.
pub fn parse_ops(args: &[&[u8]]) -> Result<Vec<Op>, String> {
    let mut ops = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let a = |k: usize| args.get(i + k);
        let Some(op) = Word::op(args[i]) else {
            return Err(bad("unknown op"));
        };
        let (parsed, used) = match op {
            Word::Grant => {
                let mode = match a(2).map(|m| m.to_ascii_lowercase()) {
                    Some(m) if m == b"read" => Mode::Read,
                    Some(m) if m == b"write" => Mode::Write,
                    _ => return Err(bad("mode must be read or write")),
                };
                let effect = Effect::Grant {
                    owner: owner(a(1))?,
                    mode,
                    deadline: deadline(a(3))?,
                    token: token(a(4))?,
                };
                (Op::Effect(effect), 5)
            }
            Word::Take => {
                let effect = Effect::Take {
                    owner: owner(a(1))?,
                    permits: count(a(2), "permits")?.max(1),
                    deadline: deadline(a(3))?,
                    token: token(a(4))?,
                };
                (Op::Effect(effect), 5)
            }
            Word::Limit => {
                let limit = count(a(1), "limit")?;
                if limit == 0 || limit > i32::MAX as u32 {
                    return Err(bad("limit must be from 1 to 2147483647"));
                }
                (Op::Effect(Effect::Limit { limit }), 2)
            }
            Word::Release => (
                Op::Effect(Effect::Release {
                    owner: owner(a(1))?,
                }),
                2,
            ),
            Word::Drop => {
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
            Word::Renew => {
                let effect = Effect::Renew {
                    owner: owner(a(1))?,
                    deadline: deadline(a(2))?,
                };
                (Op::Effect(effect), 3)
            }
            Word::Cap => {
                let effect = Effect::Cap {
                    owner: owner(a(1))?,
                    at: deadline(a(2))?,
                };
                (Op::Effect(effect), 3)
            }
            Word::Hold => {
                let hold = Hold {
                    reads: count(a(2), "reads")?,
                    writes: count(a(3), "writes")?,
                    deadline: deadline(a(4))?,
                    token: token(a(5))?,
                    cap: 0,
                };
                (Op::Hold(owner(a(1))?, hold), 6)
            }
            Word::Last => (Op::Last(token(a(1))?), 2),
            Word::High => (Op::High(token(a(1))?), 2),
            Word::Evicted => (Op::Evicted(deadline(a(1))?), 2),
            _ => return Err(bad("unknown op")),
        };
        ops.push(parsed);
        i += used;
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(effects: &[Effect]) -> Vec<Vec<u8>> {
        let mut args: Vec<Vec<u8>> = Vec::new();
        encode(effects, |a| {
            args.push(match a {
                Arg::Word(w) => w.as_str().as_bytes().to_vec(),
                Arg::Id(id) => id.to_vec(),
                Arg::Num(n) => n.to_string().into_bytes(),
            })
        });
        args
    }

    #[test]
    fn what_a_master_encodes_a_replica_parses_back() {
        let o = |s: &str| Id::from(s);
        let effects = vec![
            Effect::Grant {
                owner: o("a"),
                mode: Mode::Read,
                deadline: 10,
                token: 7,
            },
            Effect::Release { owner: o("a") },
            Effect::Drop {
                owner: o("b"),
                reason: DropReason::Lapse,
            },
            Effect::Renew {
                owner: o("c"),
                deadline: 20,
            },
            Effect::Limit { limit: 3 },
            Effect::Cap {
                owner: o("c"),
                at: 99,
            },
            Effect::Take {
                owner: o("d"),
                permits: 2,
                deadline: 30,
                token: 8,
            },
            // Written as the bytes they were made from, whatever the id keeps.
            Effect::Release {
                owner: o("0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b"),
            },
            Effect::Release {
                owner: o("0F4A2C1E-8D3B-4E5F-9A6B-7C8D9E0F1A2B"),
            },
        ];
        let args = text(&effects);
        let joined: Vec<String> = args
            .iter()
            .map(|a| String::from_utf8(a.clone()).unwrap())
            .collect();
        assert_eq!(
            joined.join(" "),
            "GRANT a read 10 7 RELEASE a DROP b lapse RENEW c 20 LIMIT 3 CAP c 99 TAKE d 2 30 8 \
             RELEASE 0f4a2c1e-8d3b-4e5f-9a6b-7c8d9e0f1a2b \
             RELEASE 0F4A2C1E-8D3B-4E5F-9A6B-7C8D9E0F1A2B"
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
            "GRANT a read 10 7 RELEASE a DROP b lapse RENEW c 20 HOLD d 2 1 30 9 LAST 11 HIGH 12 EVICTED 40"
                .split(' ')
                .map(str::as_bytes)
                .collect();
        let ops = parse_ops(&args).unwrap();
        assert_eq!(ops.len(), 8);
        assert_eq!(ops[5], Op::Last(11));
        assert_eq!(ops[6], Op::High(12));
        assert_eq!(ops[7], Op::Evicted(40));
        let too_big = (TOKEN_CEILING + 1).to_string();
        for bad in [
            "GRANT a read 10".to_string(),
            "GRANT a sideways 10 7".into(),
            "DROP b later".into(),
            "RENEW c -1".into(),
            "HOLD d 99999999999 0 1 1".into(),
            "NOPE".into(),
            "GRANT  read 10 7".into(),
            "LIMIT 0".into(),
            format!("LAST {too_big}"),
            format!("GRANT a read 1 {too_big}"),
        ] {
            let args: Vec<&[u8]> = bad.split(' ').map(str::as_bytes).collect();
            assert!(parse_ops(&args).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_rewrite_parses_back_to_the_key_it_was_made_from() {
        let mut lock = Lock::new();
        lock.observe_token(90);
        lock.restore_limit(200);
        let hold = |token| Hold {
            reads: 1,
            writes: 0,
            deadline: 1000 + token,
            token,
            cap: 0,
        };
        for i in 0..(HOLDS_PER_COMMAND as u64 + 3) {
            lock.restore(Id::from(format!("o{i}").as_str()), hold(i + 1));
        }
        let cmds = rewrite(Kind::Semaphore, &lock, 500);
        assert_eq!(cmds.len(), 2, "the holders come in two commands");
        let mut holds = 0;
        for (n, cmd) in cmds.iter().enumerate() {
            let mut args: Vec<Vec<u8>> = Vec::new();
            encode_records(cmd, |a| {
                args.push(match a {
                    Arg::Word(w) => w.as_str().as_bytes().to_vec(),
                    Arg::Id(id) => id.to_vec(),
                    Arg::Num(n) => n.to_string().into_bytes(),
                })
            });
            let refs: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
            let ops = parse_ops(&refs).unwrap();
            if n == 0 {
                assert_eq!(&ops[..2], &[Op::Last(90), Op::High(500)]);
                assert_eq!(ops[2], Op::Effect(Effect::Limit { limit: 200 }));
            }
            for op in ops {
                if let Op::Hold(owner, h) = op {
                    assert_eq!(lock.holders().find(|v| *v.owner == owner).unwrap().hold, h);
                    holds += 1;
                }
            }
        }
        assert_eq!(holds, HOLDS_PER_COMMAND + 3);
    }

    #[test]
    fn words_index_their_table() {
        for (i, w) in Word::ALL.iter().enumerate() {
            assert_eq!(w.index(), i);
        }
    }
}
