//! Clients parked by `WAIT`, on Redis's blocked-client API: the core keeps each key's queue
//! of waiter ids; here each id maps to its blocked client. A grant answers the client with its
//! token; a timeout answers nil; a client that leaves (disconnect, CLIENT KILL, CLIENT
//! UNBLOCK) is taken out of its queue and never granted. Every blocked client is unblocked
//! exactly once, which is what frees Redis's handle.

use std::ffi::CStr;
use std::os::raw::{c_int, c_void};

use redis_module::{raw, Context};

use crate::clock::now_ms;
use crate::state::{self, WaiterRec};

/// What a parked client is answered.
enum Wake {
    Token(u64),
    Gone,
    Demoted,
}

pub const GONE: &CStr =
    c"LOCKGONE the key was deleted, renamed or flushed while this request waited";
pub const DEMOTED: &CStr =
    c"READONLY this server became a replica while the request waited: retry on the master";

/// A fresh waiter id (ids grow with arrival, which is the queue's order).
pub fn next_id() -> u64 {
    state::with(|s| {
        s.next_waiter += 1;
        s.next_waiter
    })
}

/// Parks the calling client as waiter `id` of `key` in `db` for up to `wait_ms` (0: no
/// limit). The command handler then returns without a reply.
pub fn block(ctx: &Context, id: u64, db: i32, key: &[u8], wait_ms: u64) {
    unsafe {
        let bc = raw::RedisModule_BlockClient.unwrap()(
            ctx.ctx,
            Some(on_reply),
            Some(on_timeout),
            Some(free_wake),
            wait_ms as i64,
        );
        raw::RedisModule_SetDisconnectCallback.unwrap()(bc, Some(on_disconnect));
        state::with(|s| {
            s.waiters.insert(
                id,
                WaiterRec {
                    bc,
                    db,
                    key: key.into(),
                    since_ms: now_ms(),
                },
            );
            s.by_client.insert(bc as usize, id);
            s.stats.waits += 1;
        });
    }
}

fn unblock(id: u64, wake: Wake) {
    let Some(rec) = state::with(|s| {
        let rec = s.waiters.remove(&id)?;
        s.by_client.remove(&(rec.bc as usize));
        match wake {
            Wake::Token(_) => {
                let waited = now_ms().saturating_sub(rec.since_ms);
                s.stats.handoffs += 1;
                s.stats.wait_ms_total += waited;
                s.stats.wait_ms_max = s.stats.wait_ms_max.max(waited);
            }
            Wake::Gone => s.stats.waiters_lockgone += 1,
            // Answered READONLY: it leaves this server for the new master.
            Wake::Demoted => s.stats.waiters_left += 1,
        }
        Some(rec)
    }) else {
        return;
    };
    let data = Box::into_raw(Box::new(wake));
    unsafe {
        raw::RedisModule_UnblockClient.unwrap()(rec.bc, data.cast());
    }
}

/// Waiter `id` was granted `token`: answer it.
pub fn grant(id: u64, token: u64) {
    unblock(id, Wake::Token(token));
}

/// Waiter `id`'s key went away: answer it with an error.
pub fn answer_gone(id: u64) {
    unblock(id, Wake::Gone);
}

fn waiters_of(db: i32) -> Vec<u64> {
    state::with(|s| {
        s.waiters
            .iter()
            .filter(|(_, r)| db == -1 || r.db == db)
            .map(|(id, _)| *id)
            .collect()
    })
}

/// FLUSHDB / FLUSHALL: answer every waiter of `db` (-1: of every db).
pub fn answer_all_gone(db: i32) {
    for id in waiters_of(db) {
        answer_gone(id);
    }
}

/// This master became a replica: only its new master can grant, so answer every waiter at
/// once (READONLY, which clients retry) instead of letting them wait out their timeout.
pub fn answer_all_demoted() {
    for id in waiters_of(-1) {
        unblock(id, Wake::Demoted);
    }
}

/// The client behind `bc` stops waiting: take it out of the registry, queue the removal from
/// its key (done by the wake-up timer, where replication is safe), and free the handle.
fn leave(bc: *mut raw::RedisModuleBlockedClient) {
    let Some(rec) = state::with(|s| {
        let id = s.by_client.remove(&(bc as usize))?;
        let rec = s.waiters.remove(&id)?;
        s.cancels.push((rec.db, rec.key.clone(), id));
        Some(rec)
    }) else {
        return;
    };
    crate::wakeup::arm(now_ms());
    unsafe {
        raw::RedisModule_UnblockClient.unwrap()(rec.bc, std::ptr::null_mut());
    }
}

extern "C" fn on_reply(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    unsafe {
        let data = raw::RedisModule_GetBlockedClientPrivateData.unwrap()(ctx).cast::<Wake>();
        match data.as_ref() {
            Some(Wake::Token(t)) => {
                raw::RedisModule_ReplyWithLongLong.unwrap()(ctx, *t as i64);
            }
            Some(Wake::Gone) => {
                raw::RedisModule_ReplyWithError.unwrap()(ctx, GONE.as_ptr());
            }
            Some(Wake::Demoted) => {
                raw::RedisModule_ReplyWithError.unwrap()(ctx, DEMOTED.as_ptr());
            }
            None => {
                raw::RedisModule_ReplyWithNull.unwrap()(ctx);
            }
        }
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn on_timeout(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    unsafe {
        let bc = raw::RedisModule_GetBlockedClientHandle.unwrap()(ctx);
        state::with(|s| s.stats.wait_timeouts += 1);
        leave(bc);
        raw::RedisModule_ReplyWithNull.unwrap()(ctx);
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn on_disconnect(
    _ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    state::with(|s| {
        if s.by_client.contains_key(&(bc as usize)) {
            s.stats.waiters_left += 1;
        }
    });
    leave(bc);
}

extern "C" fn free_wake(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        unsafe { drop(Box::from_raw(data.cast::<Wake>())) };
    }
}
