//! The last line of defence: a panic inside a module aborts the whole Redis server, so every
//! entry point runs under `catch_unwind` and turns a panic into an error reply.

use std::panic::{catch_unwind, AssertUnwindSafe};

use redis_module::{RedisError, RedisResult};

pub const INTERNAL: &str = "ERR internal error in the lease module (a bug; please report it)";

/// Runs a command handler; a panic becomes an error reply.
pub fn command(f: impl FnOnce() -> RedisResult) -> RedisResult {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(Err(RedisError::Str(INTERNAL)))
}

/// Runs a callback that has nobody to answer; a panic is swallowed.
pub fn quietly<T>(f: impl FnOnce() -> T) -> Option<T> {
    catch_unwind(AssertUnwindSafe(f)).ok()
}
