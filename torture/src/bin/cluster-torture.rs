//! `make torture`'s cluster run: the figures, and a non-zero exit when one is not zero.
//!
//! Environment: `REDIS_LEASE_CLUSTER_TORTURE_SECS` (default 120), the time faults are
//! injected; `REDIS_LEASE_TORTURE_OUT` (default `tmp/torture`): the record goes to `cluster/`
//! in it.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use redis_lease_torture::cluster::{run, Config};

fn main() -> ExitCode {
    let secs: u64 = std::env::var("REDIS_LEASE_CLUSTER_TORTURE_SECS")
        .ok()
        .map(|v| {
            v.parse()
                .expect("REDIS_LEASE_CLUSTER_TORTURE_SECS: a whole number")
        })
        .unwrap_or(120);
    let out = PathBuf::from(
        std::env::var("REDIS_LEASE_TORTURE_OUT").unwrap_or_else(|_| "tmp/torture".into()),
    )
    .join("cluster");
    let out = std::path::absolute(&out).unwrap_or(out);
    eprintln!("cluster torture: {secs} s of faults ...");
    let r = run(&Config::new(Duration::from_secs(secs), out.clone()));
    println!("{}", r.table());
    println!("records: {}", out.display());
    for s in r.overlap_samples.iter().chain(&r.token_samples).take(20) {
        println!("  {s}");
    }
    if let Some(s) = &r.faults.stuck {
        println!("  stuck: {s}");
    }
    for f in &r.faults.reshards_failed {
        println!("  reshard failed: {f}");
    }
    let failures = r.failures();
    if failures.is_empty() {
        println!("cluster: goal met");
        ExitCode::SUCCESS
    } else {
        println!("cluster: GOAL MISSED: {}", failures.join("; "));
        ExitCode::FAILURE
    }
}
