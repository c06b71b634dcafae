//! The last line of defence: a panic inside a module aborts the whole Redis server, so every
//! entry point runs under `catch_unwind` and turns a panic into an error reply.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{logging, RedisError, RedisResult};

pub const INTERNAL: &str = "ERR internal error in the lease module (a bug; please report it)";

/// Runs a command handler; a panic becomes an error reply (and a warning in the log).
pub fn command(f: impl FnOnce() -> RedisResult) -> RedisResult {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        logging::log_warning("lease: a command handler panicked; it answered an error");
        Err(RedisError::Str(INTERNAL))
    })
}

/// Runs a callback that has nobody to answer; a panic is logged as a warning and swallowed.
pub fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f))
        .map_err(|_| logging::log_warning("lease: a callback panicked; it was abandoned"))
        .ok()
}
