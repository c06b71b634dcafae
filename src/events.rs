//! Server events the module reacts to: a flush answers the waiters of the flushed keys, a
//! promotion to master looks at every key again (a replica lets its wake-ups go), a demotion
//! answers the waiters (only the new master can grant), and a key
//! renamed or moved to another db gets its wake-up under its new name.

use std::os::raw::c_void;

use redis_module::{raw, Context, NotifyEvent, Status};

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
/// its db selected).
pub fn on_generic(ctx: &Context, _kind: NotifyEvent, event: &str, key: &[u8]) {
    if event != "rename_to" && event != "move_to" {
        return;
    }
    let db = crate::commands::selected_db(ctx);
    crate::guard::quietly(|| crate::wakeup::visit(ctx, db, key, |place, v| v.moved_in(place)));
}
