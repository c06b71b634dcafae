//! The short cluster torture run that `cargo test` (and so `make test`) includes: about 35 s
//! of reshards of slots holding locks, CLUSTER FAILOVER and kill -9 of masters, one master's
//! clock 1.5 s ahead, quarantine on; asserting no overlap, no stale write accepted, no token
//! repeated or backward, no lost reply, no split data key, and that lock slots really moved.
//! `make torture` runs it longer (`REDIS_LEASE_CLUSTER_TORTURE_SECS`, default 120).

use std::path::PathBuf;
use std::time::Duration;

use redis_lease_torture::cluster::{run, Config};

#[test]
fn fenced_leases_hold_while_slots_move_masters_fail_over_and_a_clock_is_skewed() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cluster-torture-short");
    let r = run(&Config::new(Duration::from_secs(35), out.clone()));
    let shown = r.table();
    eprintln!("{shown}\nrecords: {}", out.display());
    let failures = r.failures();
    assert!(
        failures.is_empty(),
        "{}\n{shown}\nsamples: {:#?}\nfailed reshards: {:#?}\nrecords (sections, node logs): {}",
        failures.join("; "),
        r.overlap_samples
            .iter()
            .chain(&r.token_samples)
            .take(10)
            .collect::<Vec<_>>(),
        r.faults.reshards_failed,
        out.display()
    );
    assert!(
        r.faults.failovers + r.faults.kills >= 1,
        "no failover\n{shown}"
    );
}
