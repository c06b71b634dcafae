//! Redis Cluster: this node's id, messages to other nodes' modules over the cluster bus
//! (`RedisModule_SendClusterMessage`, `RedisModule_RegisterClusterMessageReceiver`), and a
//! command filter that shows the module every `CLUSTER SETSLOT` before it runs (a slot
//! starting or ending a move), all on the main thread.

use std::os::raw::{c_char, c_int, c_uchar};
use std::sync::OnceLock;

use redis_module::raw;

use super::ctx::Ctx;
use super::string::RStr;
use super::{api, api_opt, guard};

/// A node id of the cluster (40 hex characters).
pub type NodeId = [u8; raw::REDISMODULE_NODE_ID_LEN as usize];

/// What the module does with cluster traffic (implemented above this layer).
pub struct Handlers {
    /// A message of `kind` from the node `sender`.
    pub message: fn(&Ctx, &NodeId, u8, &[u8]),
    /// `CLUSTER SETSLOT ...` is about to run (its arguments after SETSLOT, as given).
    pub setslot: fn(&[&[u8]]),
}

static HANDLERS: OnceLock<Handlers> = OnceLock::new();

/// A context to send messages from where Redis gives none (the command filter): detached,
/// made while loading, used on the main thread only.
struct Sender(*mut raw::RedisModuleCtx);
// SAFETY: the pointer is only used on Redis's main thread (filters, cron, receivers); the
// OnceLock needs Send + Sync to be a static.
unsafe impl Send for Sender {}
// SAFETY: as above.
unsafe impl Sync for Sender {}
static SENDER: OnceLock<Sender> = OnceLock::new();

/// This node's id, when the server runs in cluster mode.
pub fn my_id() -> Option<NodeId> {
    let f = api_opt!(RedisModule_GetMyClusterID)?;
    // SAFETY: Redis returns NULL outside cluster mode, else its own id of NODE_ID_LEN bytes,
    // copied here at once.
    unsafe {
        let p = f();
        if p.is_null() {
            return None;
        }
        let mut id = [0u8; raw::REDISMODULE_NODE_ID_LEN as usize];
        std::ptr::copy_nonoverlapping(p.cast::<u8>(), id.as_mut_ptr(), id.len());
        Some(id)
    }
}

/// Sends `payload` as a message of `kind` to the module on node `to` (every node when
/// `None`); false if Redis refused (an unknown or unconnected node).
pub fn send(to: Option<&NodeId>, kind: u8, payload: &[u8]) -> bool {
    let (Some(sender), Some(f), Ok(len)) = (
        SENDER.get(),
        api_opt!(RedisModule_SendClusterMessage),
        u32::try_from(payload.len()),
    ) else {
        return false;
    };
    let target = to.map_or(std::ptr::null(), |id| id.as_ptr().cast::<c_char>());
    // SAFETY: the detached context lives for the server's life; `target` is NULL or a node id
    // of NODE_ID_LEN bytes; Redis copies the payload into the bus message.
    let rc = unsafe { f(sender.0, target, kind, payload.as_ptr().cast(), len) };
    rc == raw::REDISMODULE_OK as c_int
}

/// Subscribes `h` to messages of each kind in `kinds` and to `CLUSTER SETSLOT` (cluster mode
/// only; called while loading).
pub fn init(ctx: &Ctx, kinds: &[u8], h: Handlers) -> Result<(), String> {
    let _ = HANDLERS.set(h);
    // SAFETY: called while loading with the module's context; the detached context is kept
    // for the server's life.
    let detached = unsafe { api!(RedisModule_GetDetachedThreadSafeContext)(ctx.raw()) };
    if detached.is_null() {
        return Err("could not make a context for cluster messages".into());
    }
    let _ = SENDER.set(Sender(detached));
    for kind in kinds {
        // SAFETY: called while loading; the receiver is a plain function.
        unsafe {
            api!(RedisModule_RegisterClusterMessageReceiver)(ctx.raw(), *kind, Some(on_message))
        };
    }
    // SAFETY: called while loading; the filter is a plain function. NOSELF: the module's own
    // RM_Call are not filtered.
    let filter = unsafe {
        api!(RedisModule_RegisterCommandFilter)(
            ctx.raw(),
            Some(on_command),
            raw::REDISMODULE_CMDFILTER_NOSELF as c_int,
        )
    };
    if filter.is_null() {
        return Err("could not register the CLUSTER SETSLOT filter".into());
    }
    Ok(())
}

extern "C" fn on_message(
    ctx: *mut raw::RedisModuleCtx,
    sender: *const c_char,
    kind: u8,
    payload: *const c_uchar,
    len: u32,
) {
    if sender.is_null() || (payload.is_null() && len > 0) {
        return;
    }
    guard::callback("a cluster message", || {
        // SAFETY: Redis passes the receiver's context, the sender's id (NODE_ID_LEN bytes) and
        // the payload of `len` bytes, all valid for the call.
        let (ctx, id, payload) = unsafe {
            let mut id = [0u8; raw::REDISMODULE_NODE_ID_LEN as usize];
            std::ptr::copy_nonoverlapping(sender.cast::<u8>(), id.as_mut_ptr(), id.len());
            let payload = if len == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(payload, len as usize)
            };
            (Ctx::from_raw(ctx), id, payload)
        };
        if let (Some(h), Some(ctx)) = (HANDLERS.get(), ctx) {
            (h.message)(&ctx, &id, kind, payload);
        }
    });
}

/// Every command passes here before it runs: costs one argument read unless it is CLUSTER.
extern "C" fn on_command(f: *mut raw::RedisModuleCommandFilterCtx) {
    guard::callback("the CLUSTER SETSLOT filter", || {
        // SAFETY: the filter's context, valid for the call; the argument strings it hands
        // out live at least as long, and are only read.
        let arg = |i: c_int| unsafe {
            RStr::from_raw(api!(RedisModule_CommandFilterArgGet)(f, i))
                .map_or(&[][..], |s| s.bytes())
        };
        if !arg(0).eq_ignore_ascii_case(b"cluster") || !arg(1).eq_ignore_ascii_case(b"setslot") {
            return;
        }
        // SAFETY: as above.
        let n = unsafe { api!(RedisModule_CommandFilterArgsCount)(f) };
        let args: Vec<&[u8]> = (2..n).map(arg).collect();
        if let Some(h) = HANDLERS.get() {
            (h.setslot)(&args);
        }
    });
}
