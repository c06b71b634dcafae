//! The short torture run that `cargo test` (and so `make test`) includes: the protected
//! configuration (quarantine = ttl = 3 s, grants and renewals acknowledged by a replica) for
//! about 30 s, until each of the four faults forced a failover once, asserting that no two
//! sections overlapped, no stale write got through, and tokens only increased. `make torture`
//! is the full run of both configurations.
//!
//! Timing is not asserted: under load failovers take longer and fewer happen; the run then
//! goes on (up to a minute) and counts what happened. At least one forced failover is required,
//! since a run without one proves nothing.

use std::path::PathBuf;
use std::time::Duration;

use redis_lease_torture::run::{run, Config};
use redis_lease_torture::table::table;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quarantine_and_replica_acks_keep_holders_apart_through_forced_failovers() {
    let mut config = Config::protected(Duration::from_secs(20), 4);
    config.max_time = Duration::from_secs(60);
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("torture-short");
    config.out = Some(out.clone());
    let r = run(config).await;
    let shown = table(std::slice::from_ref(&r));
    eprintln!("{shown}\nrecords: {}", out.display());
    let f = &r.figures;
    let evidence = format!(
        "{shown}\noverlaps: {:#?}\nrecords (timeline, sections, server and sentinel logs): {}",
        r.overlap_samples,
        out.display()
    );
    assert_eq!(f.overlaps, 0, "two holders inside at once\n{evidence}");
    assert_eq!(f.stale_accepted, 0, "a stale write got through\n{evidence}");
    assert_eq!(
        (f.token_repeats, f.token_backwards),
        (0, 0),
        "tokens repeated or went backwards\n{evidence}"
    );
    assert_eq!(
        r.workers.hung, 0,
        "a client call never answered\n{evidence}"
    );
    assert!(
        r.faults.stuck.is_none(),
        "the group did not heal\n{evidence}"
    );
    assert!(r.faults.forced() >= 1, "no failover was forced\n{evidence}");
    assert!(f.completed > 0, "no section completed\n{evidence}");
}
