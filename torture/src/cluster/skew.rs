//! The clock shim: `shim/skew.c`, built with gcc at run time, preloaded into one master to shift
//! its wall clock (CLOCK_REALTIME, gettimeofday, time) by a fixed number of ms.

use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCE: &str = include_str!("../../shim/skew.c");

/// Builds the shim into `dir`; answers the `.so`'s path.
pub fn build(dir: &Path) -> Result<PathBuf, String> {
    let src = dir.join("skew.c");
    let so = dir.join("skew.so");
    std::fs::write(&src, SOURCE).map_err(|e| format!("write {}: {e}", src.display()))?;
    let out = Command::new("gcc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&so)
        .arg(&src)
        .arg("-ldl")
        .output()
        .map_err(|e| format!("gcc: {e}"))?;
    if !out.status.success() {
        return Err(format!("gcc: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(so)
}
