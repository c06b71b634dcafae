//! What every hold has: its timing, its renewal, its status, its release, and fenced writes
//! (`LEASE.EXEC`) made under it.

pub(crate) mod exec;
pub(crate) mod held;
pub(crate) mod release;
mod renew;
pub(crate) mod status;
mod timing;

pub(crate) use renew::*;
pub(crate) use timing::confirm_deadline;
pub use timing::LeaseTiming;
