//! The RWLOCK.* and LEADER.* commands: parse, call the core, commit, reply.

use std::collections::BTreeMap;

use redis_lease_core::{Acquire, Changes, Election, Env, LockError, Mode, Request, RwLock};
use redis_module::redisvalue::RedisValueKey;
use redis_module::{raw, Context, ContextFlags, RedisError, RedisResult, RedisString, RedisValue};

use crate::clock;
use crate::commit::{commit, run, Place};
use crate::key::{Found, Key, WRONGTYPE};
use crate::parse::{self, Wait};
use crate::types::LeaseValue;
use crate::{blocking, config, guard};

fn err(msg: String) -> RedisError {
    RedisError::String(msg)
}

fn arity(args: &[RedisString], ok: impl Fn(usize) -> bool) -> Result<(), RedisError> {
    if ok(args.len()) {
        return Ok(());
    }
    let name = args
        .first()
        .map(|a| parse::quoted(a.as_slice()).to_lowercase())
        .unwrap_or_default();
    Err(err(format!(
        "ERR wrong number of arguments for '{name}' command"
    )))
}

fn owner<'a>(arg: &'a RedisString, what: &str) -> Result<&'a [u8], RedisError> {
    parse::id(arg.as_slice(), what, config::max_id_length()).map_err(err)
}

fn ttl(arg: &RedisString) -> Result<u64, RedisError> {
    parse::ttl(arg.as_slice(), config::max_ttl()).map_err(err)
}

/// The WAIT option, as far as this context allows blocking: inside MULTI/EXEC or a script a
/// request answers at once, as if no WAIT was given.
fn wait(ctx: &Context, rest: &[RedisString]) -> Result<Option<u64>, RedisError> {
    let rest: Vec<&[u8]> = rest.iter().map(|a| a.as_slice()).collect();
    let Wait::Ms(ms) = parse::wait_option(&rest).map_err(err)? else {
        return Ok(None);
    };
    let no_block = ContextFlags::MULTI | ContextFlags::LUA | ContextFlags::DENY_BLOCKING;
    Ok((!ctx.get_flags().intersects(no_block)).then_some(ms))
}

pub fn selected_db(ctx: &Context) -> i32 {
    unsafe { raw::RedisModule_GetSelectedDb.unwrap()(ctx.ctx) }
}

fn open(ctx: &Context, name: &RedisString) -> Result<Key, RedisError> {
    Key::open_str(ctx.ctx, name).ok_or(RedisError::Str("ERR could not open the key"))
}

/// Whole ms left until `deadline` (a live one: `deadline > now`), rounded down against the
/// clock's fraction of a ms.
fn ms_left(deadline: u64, now: u64, fraction: bool) -> RedisValue {
    let left = deadline
        .saturating_sub(now)
        .saturating_sub(u64::from(fraction));
    RedisValue::Integer(left.min(i64::MAX as u64) as i64)
}

fn token(t: u64) -> RedisValue {
    RedisValue::Integer(t.min(i64::MAX as u64) as i64)
}

/// A request that may be granted, refused or parked (RLOCK, WLOCK, CAMPAIGN).
fn acquire<V: LeaseValue>(
    ctx: &Context,
    name: &RedisString,
    owner_arg: &RedisString,
    block_ms: Option<u64>,
    op: impl FnOnce(&mut V, &mut Env, Option<u64>) -> (Changes, Result<Acquire, LockError>),
) -> RedisResult {
    let key = open(ctx, name)?;
    let v = match key.get::<V>() {
        Found::Ours(v) => v,
        Found::Empty => key.create::<V>(),
        Found::WrongType => return Err(RedisError::Str(WRONGTYPE)),
    };
    let id = block_ms.map(|_| blocking::next_id());
    let before = v.lock().holder_count();
    let (changes, result) = run(v, clock::now(), |v, env| op(v, env, id));
    let db = selected_db(ctx);
    if let (Ok(Acquire::Queued), Some(id), Some(ms)) = (result, id, block_ms) {
        blocking::block(ctx, id, db, name.as_slice(), ms);
    }
    let place = Place {
        ctx,
        key: &key,
        name,
        db,
        owner: Some(owner_arg),
    };
    commit(&place, v, changes, true, before);
    match result {
        Ok(Acquire::Granted(t)) => Ok(token(t)),
        Ok(Acquire::Busy) => Ok(RedisValue::Null),
        Ok(Acquire::Queued) => Ok(RedisValue::NoReply),
        Err(e) => Err(err(e.to_string())),
    }
}

/// A change to an existing holder (UNLOCK, RENEW, RESIGN); `missing` answers a missing key.
fn change<V: LeaseValue, T>(
    ctx: &Context,
    name: &RedisString,
    owner_arg: &RedisString,
    missing: T,
    op: impl FnOnce(&mut V, &mut Env) -> (Changes, T),
) -> Result<T, RedisError> {
    let key = open(ctx, name)?;
    let v = match key.get::<V>() {
        Found::Ours(v) => v,
        Found::Empty => return Ok(missing),
        Found::WrongType => return Err(RedisError::Str(WRONGTYPE)),
    };
    let before = v.lock().holder_count();
    let (changes, out) = run(v, clock::now(), op);
    let place = Place {
        ctx,
        key: &key,
        name,
        db: selected_db(ctx),
        owner: Some(owner_arg),
    };
    commit(&place, v, changes, true, before);
    Ok(out)
}

/// Reads a value without changing it; `None` for a missing key.
fn read<V: LeaseValue, T>(
    ctx: &Context,
    name: &RedisString,
    f: impl FnOnce(Option<&V>) -> T,
) -> Result<T, RedisError> {
    let Some(key) = Key::open_read(ctx.ctx, name) else {
        return Ok(f(None));
    };
    let out = match key.get::<V>() {
        Found::Ours(v) => f(Some(v)),
        Found::Empty => f(None),
        Found::WrongType => return Err(RedisError::Str(WRONGTYPE)),
    };
    Ok(out)
}

fn rw_lock(ctx: &Context, args: Vec<RedisString>, mode: Mode) -> RedisResult {
    arity(&args, |n| n >= 4)?;
    let owner = owner(&args[2], "owner")?;
    let ttl = ttl(&args[3])?;
    let block_ms = wait(ctx, &args[4..])?;
    acquire::<RwLock>(ctx, &args[1], &args[2], block_ms, |v, env, wait| {
        let req = Request {
            owner,
            mode,
            ttl,
            wait,
            max_waiters: config::max_waiters(),
        };
        v.lock(&req, env)
    })
}

pub fn rlock(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| rw_lock(ctx, args, Mode::Read))
}

pub fn wlock(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| rw_lock(ctx, args, Mode::Write))
}

pub fn unlock(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        arity(&args, |n| n == 3)?;
        let owner = owner(&args[2], "owner")?;
        let done = change::<RwLock, _>(ctx, &args[1], &args[2], false, |v, env| {
            v.unlock(owner, env)
        })?;
        Ok(RedisValue::Integer(done.into()))
    })
}

pub fn renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        arity(&args, |n| n == 4)?;
        let owner = owner(&args[2], "owner")?;
        let ttl = ttl(&args[3])?;
        let t = change::<RwLock, _>(ctx, &args[1], &args[2], None, |v, env| {
            v.renew(owner, ttl, env)
        })?;
        Ok(t.map_or(RedisValue::Null, token))
    })
}

fn field(name: &str) -> RedisValueKey {
    RedisValueKey::String(name.to_string())
}

pub fn info(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        arity(&args, |n| n == 2)?;
        let (now, fraction) = clock::now();
        read::<RwLock, _>(ctx, &args[1], |v| {
            let mut holders = Vec::new();
            let (mut mode, mut waiters, mut last) = ("none", 0, 0);
            if let Some(v) = v {
                let lock = &v.0;
                mode = lock.mode(now).map_or("none", Mode::as_str);
                waiters = lock.waiter_count();
                last = lock.last_token();
                // In grant order, whatever the table's order.
                let mut live: Vec<_> = lock.live_holders(now).collect();
                live.sort_unstable_by_key(|h| h.hold.token);
                for h in live {
                    let counts = [(Mode::Write, h.hold.writes), (Mode::Read, h.hold.reads)];
                    for (m, count) in counts.into_iter().filter(|(_, c)| *c > 0) {
                        let mut e = BTreeMap::new();
                        e.insert(field("owner"), RedisValue::StringBuffer(h.owner.to_vec()));
                        e.insert(field("mode"), RedisValue::SimpleStringStatic(m.as_str()));
                        e.insert(field("count"), RedisValue::Integer(count.into()));
                        e.insert(field("ttl"), ms_left(h.hold.deadline, now, fraction));
                        e.insert(field("token"), token(h.hold.token));
                        holders.push(RedisValue::OrderedMap(e));
                    }
                }
            }
            let mut m = BTreeMap::new();
            m.insert(field("mode"), RedisValue::SimpleStringStatic(mode));
            m.insert(field("holders"), RedisValue::Array(holders));
            m.insert(field("waiters"), RedisValue::Integer(waiters as i64));
            m.insert(field("token"), token(last));
            RedisValue::OrderedMap(m)
        })
    })
}

pub fn campaign(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        arity(&args, |n| n >= 4)?;
        let candidate = owner(&args[2], "candidate")?;
        let ttl = ttl(&args[3])?;
        let block_ms = wait(ctx, &args[4..])?;
        acquire::<Election>(ctx, &args[1], &args[2], block_ms, |v, env, wait| {
            v.campaign(candidate, ttl, wait, config::max_waiters(), env)
        })
    })
}

pub fn leader_renew(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        arity(&args, |n| n == 4)?;
        let candidate = owner(&args[2], "candidate")?;
        let ttl = ttl(&args[3])?;
        let t = change::<Election, _>(ctx, &args[1], &args[2], None, |v, env| {
            v.renew(candidate, ttl, env)
        })?;
        Ok(t.map_or(RedisValue::Null, token))
    })
}

pub fn resign(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        arity(&args, |n| n == 3)?;
        let candidate = owner(&args[2], "candidate")?;
        let done = change::<Election, _>(ctx, &args[1], &args[2], false, |v, env| {
            v.resign(candidate, env)
        })?;
        Ok(RedisValue::Integer(done.into()))
    })
}

pub fn current(ctx: &Context, args: Vec<RedisString>) -> RedisResult {
    guard::command(|| {
        arity(&args, |n| n == 2)?;
        let (now, fraction) = clock::now();
        read::<Election, _>(ctx, &args[1], |v| match v.and_then(|v| v.current(now)) {
            Some(h) => RedisValue::Array(vec![
                RedisValue::StringBuffer(h.owner.to_vec()),
                token(h.hold.token),
                ms_left(h.hold.deadline, now, fraction),
            ]),
            None => RedisValue::Null,
        })
    })
}
