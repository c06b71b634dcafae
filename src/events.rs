//! Server events the module reacts to: a flush answers the waiters of the flushed keys, a
//! promotion to master looks at every key again (a replica lets its wake-ups go), a demotion
//! answers the waiters (only the new master can grant), and a key
//! renamed or moved to another db gets its wake-up under its new name.

use std::os::raw::c_void;

use redis_lease_core::{Election, RwLock};
use redis_module::{raw, Context, NotifyEvent, RedisString, Status};

use crate::commit::{settle, Place};
use crate::key::{Found, Key};
use crate::types::LeaseValue;

fn subscribe(ctx: &Context, id: u64, cb: raw::RedisModuleEventCallback) -> Status {
    let event = raw::RedisModuleEvent { id, dataver: 1 };
    let rc = unsafe { raw::RedisModule_SubscribeToServerEvent.unwrap()(ctx.ctx, event, cb) };
    if rc == raw::REDISMODULE_OK as i32 {
        Status::Ok
    } else {
        Status::Err
    }
}

pub fn init(ctx: &Context) -> Status {
    if subscribe(ctx, raw::REDISMODULE_EVENT_FLUSHDB, Some(on_flush)) == Status::Err
        || subscribe(
            ctx,
            raw::REDISMODULE_EVENT_REPLICATION_ROLE_CHANGED,
            Some(on_role),
        ) == Status::Err
    {
        return Status::Err;
    }
    Status::Ok
}

extern "C" fn on_flush(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    data: *mut c_void,
) {
    if subevent != raw::REDISMODULE_SUBEVENT_FLUSHDB_START || data.is_null() {
        return;
    }
    let info = unsafe { &*data.cast::<raw::RedisModuleFlushInfoV1>() };
    let db = info.dbnum;
    crate::guard::quietly(|| crate::blocking::answer_all_gone(db));
}

extern "C" fn on_role(
    ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    subevent: u64,
    _data: *mut c_void,
) {
    if subevent == raw::REDISMODULE_EVENT_REPLROLECHANGED_NOW_MASTER {
        let ctx = Context::new(ctx);
        crate::guard::quietly(|| crate::wakeup::rescan(&ctx));
    } else {
        crate::guard::quietly(crate::blocking::answer_all_demoted);
    }
}

/// Generic keyspace events: `rename_to` / `move_to` name a key's new place (the context has
/// its db selected). Its waiters were answered LOCKGONE when it left its old place (`unlink`),
/// and its pending wake-up still names the old one: clear the first, redo the second.
pub fn on_generic(ctx: &Context, _kind: NotifyEvent, event: &str, key: &[u8]) {
    if event != "rename_to" && event != "move_to" {
        return;
    }
    crate::guard::quietly(|| {
        let name = RedisString::create_from_slice(ctx.ctx, key);
        let Some(k) = Key::open_str(ctx.ctx, &name) else {
            return;
        };
        let place = Place {
            ctx,
            key: &k,
            name: &name,
            db: crate::commands::selected_db(ctx),
        };
        match k.get::<RwLock>() {
            Found::Ours(v) => moved(&place, v),
            _ => {
                if let Found::Ours(v) = k.get::<Election>() {
                    moved(&place, v);
                }
            }
        }
    });
}

fn moved<V: LeaseValue>(place: &Place, v: &mut V) {
    let lock = v.lock_mut();
    lock.forget_waiters();
    lock.wakeup = 0;
    settle(place, v);
}
