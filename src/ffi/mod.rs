//! The C API layer: every raw `RedisModule_*` call of the module is in this folder, each
//! `unsafe` block with the reason it is sound. It knows nothing of the lock rules; the layers
//! above see contexts, keys, strings and blocked clients with signatures that make misuse fail
//! to compile (a key's value cannot outlive the key, a deleted key cannot be used).

pub mod args;
pub mod block;
pub mod call;
pub mod cluster;
pub mod command;
pub mod ctx;
pub mod docs;
pub mod getkeys;
pub mod guard;
pub mod info;
pub mod io;
pub mod key;
pub mod notify;
pub mod replicate;
pub mod reply;
pub mod server;
pub mod string;
pub mod timer;
pub mod types;

/// The function pointer of a Redis module API. Every API the module calls without a
/// fallback exists in Redis 7.0, the oldest supported server; should one be missing anyway,
/// the guard around every entry point turns the panic into an error reply and a log line.
macro_rules! api {
    ($name:ident) => {{
        // SAFETY: the API table is filled once by RedisModule_Init while the module loads,
        // before any entry point runs, and only read afterwards (on the main thread).
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        match f {
            Some(f) => f,
            None => $crate::ffi::missing(stringify!($name)),
        }
    }};
}
pub(crate) use api;

/// An optional API (newer servers only): `None` where the server lacks it.
macro_rules! api_opt {
    ($name:ident) => {{
        // SAFETY: as for `api!`: filled while loading, read-only afterwards.
        #[allow(unused_unsafe)]
        let f = unsafe { redis_module::raw::$name };
        f
    }};
}
pub(crate) use api_opt;

#[cold]
pub fn missing(name: &str) -> ! {
    panic!("this server lacks the module API {name}")
}
