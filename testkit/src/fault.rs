//! The fault-injection build of the module (`make fault-module`: `LEASE.FAULT point` makes an
//! entry point panic), and servers that load it instead of the release module.

use std::path::PathBuf;

use crate::module::{check, workspace_root, SOURCE_DIRS};
use crate::server::{debug_opts, Options};

/// The fault-injection module: `REDIS_LEASE_FAULT_MODULE` (set by `make test`) if set, else
/// `<workspace>/target/fault/libredis_lease.so`, which must then be newer than its sources.
/// Panics with what to do when it is missing or stale: the guard tests never skip.
pub fn fault_module() -> PathBuf {
    let explicit = std::env::var_os("REDIS_LEASE_FAULT_MODULE").map(PathBuf::from);
    let path = explicit
        .clone()
        .unwrap_or_else(|| workspace_root().join("target/fault/libredis_lease.so"));
    let dirs: Vec<PathBuf> = SOURCE_DIRS
        .iter()
        .map(|d| workspace_root().join(d))
        .collect();
    let sources = explicit.is_none().then_some(dirs.as_slice());
    check(&path, sources).unwrap_or_else(|e| {
        panic!(
            "the fault-injection module is needed: {e}; build it with `make fault-module` \
             (or set REDIS_LEASE_FAULT_MODULE)"
        )
    })
}

/// `debug_opts` with the fault-injection module loaded in place of the release one.
pub fn fault_opts() -> Options {
    let mut o = debug_opts();
    o.no_module = true;
    o.args.push("--loadmodule".into());
    o.args.push(fault_module().display().to_string());
    o
}
