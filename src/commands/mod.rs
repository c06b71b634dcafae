//! The commands: parse, call the core, commit, reply. What every kind of key shares is here:
//! the argument rules, the acquire / change / read shapes, and the replies to the core's
//! errors (their texts live in the shell, not in the core).

pub mod exec;
#[cfg(feature = "fault-injection")]
pub mod fault;
pub mod leader;
pub mod multi;
pub mod queue;
pub mod rwlock;
pub mod semaphore;

use redis_lease_core::{Acquire, Changes, Effect, Env, Id, LockError, Wait};

use crate::commit::{decide, replay, Open, Origin};
use crate::ffi::args::Args;
use crate::ffi::ctx::Ctx;
use crate::ffi::key::{Access, Key, Typed, WRONGTYPE};
use crate::ffi::replicate::Owner;
use crate::ffi::reply::{Reply, ReplyError};
use crate::ffi::server;
use crate::num::saturating_i64;
use crate::parse::{self, Wait as WaitOpt};
use crate::value::{Saved, Stored};
use crate::{config, holdback, state, waiters, waitgraph};

pub type Outcome = Result<Reply, ReplyError>;

/// The id of a request for a new hold: 1 to `lease.max-id-length` bytes. The request's one
/// parse of its owner: the core and replication take this id.
pub fn new_id(args: &Args, i: usize, what: &str) -> Result<Id, ReplyError> {
    let bytes = parse::id(args.bytes(i), what, config::max_id_length())?;
    Ok(Id::new(bytes))
}

/// The id of a holder that may already hold: only non-empty, so a holder whose id is longer
/// than a lowered `lease.max-id-length` can still renew and release.
pub fn held_id(args: &Args, i: usize, what: &str) -> Result<Id, ReplyError> {
    let max = config::ID_LENGTH_CEILING as usize;
    Ok(Id::new(parse::id(args.bytes(i), what, max)?))
}

/// The request's owner (argument 2) for replication, which reuses the argument.
fn owner<'a>(args: &Args<'a>, id: &'a Id) -> Option<Owner<'a>> {
    args.get(2).map(|arg| Owner { arg, id })
}

pub fn ttl(args: &Args, i: usize) -> Result<u64, ReplyError> {
    parse::ttl(args.bytes(i), config::max_ttl()).map_err(ReplyError::from)
}

/// A request's options.
#[derive(Clone, Copy, Debug)]
pub struct Opts {
    /// The wait in ms as far as this context allows blocking (inside MULTI/EXEC or a script a
    /// request answers at once, as if no WAIT was given).
    pub wait: Option<u64>,
    pub permits: u32,
    /// The hold's cap in ms from its first grant: the smaller of `MAXHOLD` and
    /// `lease.max-hold` (0: none).
    pub max_hold: u64,
}

/// The options after the fixed arguments, as [`parse::Options`] read them.
pub fn opts(ctx: &Ctx, o: parse::Options) -> Opts {
    let wait = match o.wait {
        WaitOpt::Ms(ms) if ctx.may_block() => Some(ms),
        _ => None,
    };
    Opts {
        wait,
        permits: o.permits,
        max_hold: config::max_hold(o.max_hold),
    }
}

/// The options from argument `from` on (`limit`: a semaphore's, for its permits).
pub fn options(
    ctx: &Ctx,
    args: &Args,
    from: usize,
    limit: Option<u32>,
) -> Result<Opts, ReplyError> {
    let o = parse::options(&args.rest(from), limit).map_err(ReplyError::from)?;
    Ok(opts(ctx, o))
}

/// A fresh wait of `ms` (0: without limit) from now, on the monotonic clock (a wait is a
/// local duration: no step of the wall clock lengthens or shortens it). Like a lease, a wait
/// never ends early: its deadline rounds up past a whole ms.
pub fn new_wait(ms: u64) -> Wait {
    Wait {
        id: waiters::next_id(),
        until: (ms > 0).then(|| {
            let (now, fraction) = server::monotonic();
            now.saturating_add(ms).saturating_add(u64::from(fraction))
        }),
    }
}

/// The reply to a request that would close a cycle of waits (it was not queued).
pub fn deadlock() -> ReplyError {
    state::with(|s| s.stats.deadlocks += 1);
    "DEADLOCK this request would wait for an owner that waits for this owner".into()
}

/// Grants are decided, and fenced writes run, on masters only: a replica that accepts writes
/// (`replica-read-only no`) must not grant locks nobody else would see, nor run LEASE.EXEC's
/// write where its master never sees it.
pub fn writable(ctx: &Ctx) -> Result<(), ReplyError> {
    if ctx.is_master() || ctx.replicated() {
        Ok(())
    } else {
        Err("READONLY this server is a replica: locks are granted, and fenced writes run, by the master".into())
    }
}

/// The reply to a request the rules refuse.
pub fn refused(e: LockError) -> ReplyError {
    match e {
        LockError::Deadlock => deadlock(),
        LockError::UpgradeDeadlock => {
            "DEADLOCK another reader of this key already waits to upgrade to the write lock".into()
        }
        LockError::TooManyWaiters(n) => {
            format!("ERR too many waiters on this key (lease.max-waiters is {n})").into()
        }
        LockError::TokensExhausted => {
            "ERR no fencing token above the highest one seen can be issued (2^63-1 reached)".into()
        }
        // Codes of their own, so that clients match the code, not the wording.
        LockError::LimitMismatch { limit } => {
            format!("LIMIT this semaphore's limit is {limit}; a request must name the same limit")
                .into()
        }
        LockError::MaxHold { left } => format!(
            "MAXHOLD {left} ms left of this hold's max hold (its first grant + MAXHOLD or \
             lease.max-hold); a lease past it is refused"
        )
        .into(),
        LockError::PermitsMismatch { permits } => format!(
            "PERMITS this owner holds {permits} permits of this semaphore; release them before \
             asking for another number"
        )
        .into(),
    }
}

pub fn token(t: u64) -> Reply {
    Reply::Int(saturating_i64(t))
}

/// Whole ms left until `deadline` (a live one: `deadline > now`), rounded down against the
/// clock's fraction of a ms.
pub fn ms_left(deadline: u64, now: u64, fraction: bool) -> i64 {
    let left = deadline
        .saturating_sub(now)
        .saturating_sub(u64::from(fraction));
    saturating_i64(left)
}

/// A holder's cap as INFO shows it: whole ms left until it (-1: the hold has no cap).
pub fn cap_left(cap: u64, now: u64, fraction: bool) -> i64 {
    if cap == 0 {
        -1
    } else {
        ms_left(cap, now, fraction)
    }
}

fn open<'a>(ctx: &'a Ctx, args: &Args<'a>) -> Result<Key<'a>, ReplyError> {
    let name = args.get(1).ok_or(ReplyError::from("ERR missing key"))?;
    Key::open(ctx, name, Access::Write).ok_or_else(|| "ERR could not open the key".into())
}

/// A request of `owner` that may be granted, refused or parked (RLOCK, WLOCK, CAMPAIGN,
/// ACQUIRE).
pub fn acquire<K: Saved>(
    ctx: &Ctx,
    args: &Args,
    owner: &Id,
    wait_ms: Option<u64>,
    op: impl FnOnce(&mut K, &mut Env, Option<Wait>) -> (Changes, Result<Acquire, LockError>),
) -> Outcome
where
    Stored<K>: Typed,
{
    writable(ctx)?;
    let wait = wait_ms.map(new_wait);
    let key = open(ctx, args)?;
    let origin = Origin::Here {
        owner: self::owner(args, owner),
        own: false,
    };
    let result = decide::<K, _>(key, Open::Create, origin, |v, env| {
        let (mut changes, mut result) = op(&mut v.core, env, wait);
        if let (Ok(Acquire::Queued), Some(w)) = (result, wait) {
            // About to wait: refused if the wait would close a cycle of waits.
            let open = [(v.slot, K::KIND, v.core.lock())];
            if waitgraph::deadlocks(ctx, owner, w.id, &open, env.now) {
                changes.append(v.core.cancel(w.id, env).0);
                result = Err(LockError::Deadlock);
            } else {
                waiters::park(ctx, w.id, owner, v.slot, Vec::new());
            }
        }
        (changes, result)
    })
    .map_err(|_| ReplyError::from(WRONGTYPE))?
    .ok_or(ReplyError::from("ERR could not open the key"))?;
    multi::drain(ctx);
    match result {
        Ok(Acquire::Granted(t)) => Ok(token(t)),
        Ok(Acquire::Busy) => Ok(Reply::Nil),
        Ok(Acquire::Queued) => Ok(Reply::Parked),
        Err(e) => Err(refused(e)),
    }
}

/// A change to `owner`'s holds (UNLOCK, RENEW, RESIGN, RELEASE); `missing` answers a
/// missing key. `own`: the command is its own effect when that is all it did (see
/// `Origin::Here`).
pub fn change<K: Saved, T>(
    ctx: &Ctx,
    args: &Args,
    owner: &Id,
    missing: T,
    own: bool,
    op: impl FnOnce(&mut K, &mut Env) -> (Changes, T),
) -> Result<T, ReplyError>
where
    Stored<K>: Typed,
{
    writable(ctx)?;
    let key = open(ctx, args)?;
    let owner = self::owner(args, owner);
    let origin = Origin::Here { owner, own };
    let out = decide::<K, _>(key, Open::Existing, origin, |v, env| op(&mut v.core, env))
        .map_err(|_| ReplyError::from(WRONGTYPE))?;
    multi::drain(ctx);
    Ok(out.unwrap_or(missing))
}

/// A give-back that a master replicated as it came (it was all it did there): applied here as
/// that one effect, without the clock or the queue; true if the owner held.
pub fn replay_own<K: Saved>(ctx: &Ctx, args: &Args, effect: Effect) -> Result<bool, ReplyError>
where
    Stored<K>: Typed,
{
    let key = open(ctx, args)?;
    let held = replay::<K, _>(key, Open::Existing, |core, tokens| {
        let held = effect
            .owner()
            .is_some_and(|o| core.lock().holders().any(|h| h.owner == o));
        core.lock_mut().apply(&effect, tokens);
        let changes = Changes {
            effects: smallvec::smallvec![effect],
            ..Changes::default()
        };
        (changes, held)
    })
    .map_err(|_| ReplyError::from(WRONGTYPE))?;
    let Some(held) = held else {
        return Ok(false);
    };
    // This server's own AOF and replicas get it as it came.
    crate::ffi::replicate::verbatim(ctx);
    Ok(held)
}

/// What a read command sees of a key: its value, and how many of its queued waiters are
/// really waiting (some may have left; the lobby's count for a name without a key).
pub struct Seen<'a, K> {
    pub value: Option<&'a Stored<K>>,
    pub waiters: usize,
}

/// Reads a key without changing it.
pub fn read<K: Saved, T>(
    ctx: &Ctx,
    args: &Args,
    f: impl FnOnce(Seen<'_, K>) -> T,
) -> Result<T, ReplyError>
where
    Stored<K>: Typed,
{
    let name = args.get(1).ok_or(ReplyError::from("ERR missing key"))?;
    let key = Key::open(ctx, name, Access::Read);
    let value = match key.as_ref().map(|k| k.peek::<Stored<K>>()) {
        None | Some(Ok(None)) => None,
        Some(Ok(Some(v))) => Some(v),
        Some(Err(_)) => return Err(WRONGTYPE.into()),
    };
    let waiters = match value {
        Some(v) => v
            .core
            .lock()
            .waiter_count()
            .saturating_sub(waiters::cancels_of(v.slot)),
        None => holdback::waiting_on(ctx.db(), name.bytes()),
    };
    Ok(f(Seen { value, waiters }))
}
