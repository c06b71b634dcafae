//! Which module `.so` the servers load, and the guard that refuses a stale one: a `cargo test`
//! after editing `src/` must not silently test the module built before the edit.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::SystemTime;

/// The workspace root (the parent of this crate).
pub(crate) fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives inside the workspace")
}

/// The module the servers load: `REDIS_LEASE_MODULE` if set, else the workspace's
/// `target/release/libredis_lease.so` (or under `CARGO_TARGET_DIR`), which `make` builds.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("REDIS_LEASE_MODULE") {
        return PathBuf::from(p);
    }
    default_module_path()
}

fn default_module_path() -> PathBuf {
    let root = workspace_root();
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"));
    let p = target.join("release/libredis_lease.so");
    if p.exists() {
        p
    } else {
        root.join("target/release/libredis_lease.so")
    }
}

/// The directories whose files the module is built from. Cargo.toml and Cargo.lock are left
/// out on purpose: cargo does not relink the module when they change in a way that does not
/// concern it (a dependency of the client, a lint of another member), so `make` could not
/// make the module newer than them and the guard would refuse forever.
pub(crate) const SOURCE_DIRS: &[&str] = &["src", "core/src"];

/// The module to load, checked once per test process: it must exist, and when it is the
/// default one (not `REDIS_LEASE_MODULE`), it must be newer than every file it is built from.
/// Panics with what to do otherwise.
pub fn checked_module() -> PathBuf {
    static CHECKED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let explicit = std::env::var_os("REDIS_LEASE_MODULE").is_some();
            let path = module_path();
            let dirs: Vec<PathBuf> = SOURCE_DIRS
                .iter()
                .map(|d| workspace_root().join(d))
                .collect();
            check(&path, (!explicit).then_some(dirs.as_slice()))
        })
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `path` must exist; with `sources`, it must not be older than the newest file under them.
pub(crate) fn check(path: &Path, sources: Option<&[PathBuf]>) -> Result<PathBuf, String> {
    let built =
        modified(path).ok_or_else(|| format!("module {} not built: run `make`", path.display()))?;
    if let Some(dirs) = sources {
        if let Some((newest, at)) = newest_file(dirs) {
            if at > built {
                return Err(format!(
                    "module older than its sources: run `make` ({} was built before {} changed)",
                    path.display(),
                    newest.display()
                ));
            }
        }
    }
    Ok(path.to_path_buf())
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The most recently modified file under `dirs` (recursively), with its time.
fn newest_file(dirs: &[PathBuf]) -> Option<(PathBuf, SystemTime)> {
    let mut stack: Vec<PathBuf> = dirs.to_vec();
    let mut newest: Option<(PathBuf, SystemTime)> = None;
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(path);
            } else if let Ok(at) = meta.modified() {
                match &newest {
                    Some((_, n)) if *n >= at => {}
                    _ => newest = Some((path, at)),
                }
            }
        }
    }
    newest
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::{self, File};
    use std::time::Duration;

    fn touch(path: &Path, at: SystemTime) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        File::create(path).unwrap().set_modified(at).unwrap();
    }

    #[test]
    fn a_module_newer_than_every_source_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        let t = SystemTime::now() - Duration::from_secs(3600);
        touch(&dir.path().join("src/a.rs"), t);
        touch(
            &dir.path().join("src/deep/b.rs"),
            t + Duration::from_secs(1),
        );
        let so = dir.path().join("lib.so");
        touch(&so, t + Duration::from_secs(2));
        let dirs = [dir.path().join("src")];
        assert_eq!(check(&so, Some(&dirs)), Ok(so.clone()));
    }

    #[test]
    fn a_module_older_than_a_nested_source_is_refused_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let t = SystemTime::now() - Duration::from_secs(3600);
        let so = dir.path().join("lib.so");
        touch(&so, t);
        touch(&dir.path().join("src/a.rs"), t - Duration::from_secs(1));
        touch(
            &dir.path().join("src/deep/b.rs"),
            t + Duration::from_secs(1),
        );
        let dirs = [dir.path().join("src")];
        let e = check(&so, Some(&dirs)).unwrap_err();
        assert!(
            e.starts_with("module older than its sources: run `make`"),
            "{e}"
        );
        assert!(e.contains("b.rs"), "names the newer source: {e}");
    }

    #[test]
    fn an_explicit_module_is_not_compared_with_the_sources() {
        let dir = tempfile::tempdir().unwrap();
        let t = SystemTime::now() - Duration::from_secs(3600);
        let so = dir.path().join("lib.so");
        touch(&so, t);
        touch(&dir.path().join("src/a.rs"), t + Duration::from_secs(1));
        assert_eq!(check(&so, None), Ok(so.clone()));
    }

    #[test]
    fn a_missing_module_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = check(&dir.path().join("none.so"), None).unwrap_err();
        assert!(e.contains("not built: run `make`"), "{e}");
    }
}
