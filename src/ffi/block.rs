//! Blocked clients: a parked request is answered later, exactly once, through
//! `RedisModule_UnblockClient`. The module owns every wait deadline (its own timer answers a
//! wait that ran out), so clients are blocked with no Redis timeout and no timeout callback:
//! Redis's own timeout path, which can lose the reply or crash when it meets an unblock in
//! the same event-loop turn on Redis 7.0 and 7.2, is never used. (Without a timeout callback
//! `CLIENT UNBLOCK` leaves these clients alone, as Redis documents for such modules.)

use std::marker::PhantomData;
use std::os::raw::{c_int, c_void};

use redis_module::raw;

use super::api;
use super::ctx::Ctx;
use super::guard;

/// What the waiters service provides for its parked clients.
pub trait Parked: 'static {
    /// What a client is answered with.
    type Answer: 'static;
    /// Writes the reply for `answer` (`None`: the client was released without an answer).
    fn reply(ctx: &Ctx, answer: Option<&Self::Answer>);
    /// The client went away while parked (disconnected, killed, unblocked by Redis).
    fn disconnected(client: usize);
}

/// Parks the running command's client; returns its handle. The command then returns
/// without a reply.
pub fn block<P: Parked>(ctx: &Ctx) -> usize {
    // SAFETY: a command context that may block (the caller checked); the callbacks are
    // plain functions that live for the process.
    unsafe {
        let bc = api!(RedisModule_BlockClient)(
            ctx.raw(),
            Some(on_reply::<P>),
            None,
            Some(on_free::<P>),
            0,
        );
        api!(RedisModule_SetDisconnectCallback)(bc, Some(on_disconnect::<P>));
        bc as usize
    }
}

/// Answers a parked client with `answer` (its reply is written on the main thread, when
/// Redis next serves unblocked clients).
pub fn answer<P: Parked>(client: usize, answer: P::Answer) {
    let data = Box::into_raw(Box::new(answer));
    // SAFETY: `client` is a handle from `block` that was not unblocked yet (the waiters
    // service removes it from its registry before calling here, so this runs once per
    // client); Redis hands `data` back to `on_reply` and then to `on_free`.
    unsafe {
        api!(RedisModule_UnblockClient)(client as *mut raw::RedisModuleBlockedClient, data.cast());
    }
}

/// Lets go of a parked client that left, without an answer.
pub fn release(client: usize) {
    // SAFETY: as for `answer`, with no private data.
    unsafe {
        api!(RedisModule_UnblockClient)(
            client as *mut raw::RedisModuleBlockedClient,
            std::ptr::null_mut(),
        );
    }
}

struct Answer<'a, T>(&'a T, PhantomData<*mut ()>);

extern "C" fn on_reply<P: Parked>(
    ctx: *mut raw::RedisModuleCtx,
    _argv: *mut *mut raw::RedisModuleString,
    _argc: c_int,
) -> c_int {
    // SAFETY: Redis calls this with the unblocked client's reply context.
    let Some(ctx) = (unsafe { Ctx::from_raw(ctx) }) else {
        return raw::REDISMODULE_OK as c_int;
    };
    let replied = guard::callback("a blocked client's reply", || {
        // SAFETY: the private data is what `answer` boxed (or null), alive until `on_free`.
        unsafe {
            let data = api!(RedisModule_GetBlockedClientPrivateData)(ctx.raw()).cast::<P::Answer>();
            let answer = data.as_ref().map(|a| Answer(a, PhantomData));
            P::reply(&ctx, answer.as_ref().map(|a| a.0));
        }
    });
    if replied.is_none() {
        // Every parked client gets an answer, even when writing the real one failed.
        ctx.reply_error_c(guard::INTERNAL);
    }
    raw::REDISMODULE_OK as c_int
}

extern "C" fn on_free<P: Parked>(_ctx: *mut raw::RedisModuleCtx, data: *mut c_void) {
    if !data.is_null() {
        guard::callback("a blocked client's answer", || {
            // SAFETY: `data` is the box `answer` made, freed once, here.
            drop(unsafe { Box::from_raw(data.cast::<P::Answer>()) });
        });
    }
}

extern "C" fn on_disconnect<P: Parked>(
    _ctx: *mut raw::RedisModuleCtx,
    bc: *mut raw::RedisModuleBlockedClient,
) {
    guard::callback("a blocked client's disconnection", || {
        P::disconnected(bc as usize)
    });
}
