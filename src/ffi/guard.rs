//! The last line of defence: a panic inside a module aborts the whole Redis server (every
//! entry point is `extern "C"`), so every entry point from Redis runs under `catch_unwind`. A
//! command's panic becomes an error reply; a callback's is logged and the callback abandoned.

use std::ffi::CStr;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::ctx::log_warning;

pub const INTERNAL: &CStr = c"ERR internal error in the lease module (a bug; please report it)";

/// Runs a callback that has nobody to answer; a panic is logged (with `what`) and swallowed.
pub fn callback<T>(what: &str, f: impl FnOnce() -> T) -> Option<T> {
    let f = || {
        injected(what);
        f()
    };
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => Some(v),
        Err(e) => {
            log_warning(&format!(
                "lease: {what} panicked ({}); it was abandoned",
                panic_text(&*e)
            ));
            None
        }
    }
}

/// The panic's message, as printable text.
pub fn panic_text(e: &(dyn std::any::Any + Send)) -> String {
    let msg = e
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| e.downcast_ref::<String>().cloned())
        .unwrap_or_default();
    crate::text::escaped(msg.as_bytes(), 200)
}

/// The entry points a test armed to panic (`LEASE.FAULT`, in builds with the
/// `fault-injection` feature only).
#[cfg(feature = "fault-injection")]
static ARMED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Arms `point` to panic on its next runs (`None`: disarms them all).
#[cfg(feature = "fault-injection")]
pub fn arm(point: Option<String>) {
    if let Ok(mut a) = ARMED.lock() {
        match point {
            Some(p) => {
                a.insert(p);
            }
            None => a.clear(),
        }
    }
}

/// Panics if a test armed this entry point.
#[cfg(feature = "fault-injection")]
pub fn injected(what: &str) {
    if ARMED.lock().is_ok_and(|a| a.contains(what)) {
        panic!("injected fault in {what}");
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub fn injected(_what: &str) {}
