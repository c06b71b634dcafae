//! `make torture`: both configurations, the table, and a non-zero exit when the protected one
//! misses its goal.
//!
//! Environment: `REDIS_LEASE_TORTURE_SECS` (default 120): the time to spend, 40% on the
//! unprotected configuration and 60% on the protected one (which goes on, up to twice its
//! share, until `REDIS_LEASE_TORTURE_FAILOVERS` failovers, default 20, were forced);
//! `REDIS_LEASE_TORTURE_OUT` (default `tmp/torture`): where each run's record goes;
//! `REDIS_LEASE_TORTURE_ONLY` (`unprotected` or `protected`): run only that one.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use redis_lease_torture::run::{run, Config};
use redis_lease_torture::table::table;

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a whole number, not {v:?}")),
        Err(_) => default,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let secs = env_u64("REDIS_LEASE_TORTURE_SECS", 120);
    let failovers = env_u64("REDIS_LEASE_TORTURE_FAILOVERS", 20) as usize;
    let out = PathBuf::from(
        std::env::var("REDIS_LEASE_TORTURE_OUT").unwrap_or_else(|_| "tmp/torture".into()),
    );
    let mut unprotected = Config::unprotected(Duration::from_secs(secs * 4 / 10));
    unprotected.out = Some(out.join("unprotected"));
    let mut protected = Config::protected(Duration::from_secs(secs * 6 / 10), failovers);
    protected.out = Some(out.join("protected"));
    let mut reports = vec![];
    let only = std::env::var("REDIS_LEASE_TORTURE_ONLY").ok();
    let configs: Vec<Config> = [("unprotected", unprotected), ("protected", protected)]
        .into_iter()
        .filter(|(n, _)| only.as_deref().is_none_or(|o| o == *n))
        .map(|(_, c)| c)
        .collect();
    for c in configs {
        eprintln!("torture: {} ...", c.name);
        let r = run(c).await;
        eprintln!(
            "torture: {} done in {:.0} s: {} failovers, {} sections, {} overlaps",
            r.config.name,
            r.elapsed.as_secs_f64(),
            r.faults.forced(),
            r.figures.sections,
            r.figures.overlaps
        );
        for s in &r.overlap_samples {
            eprintln!("  overlap: {s}");
        }
        reports.push(r);
    }
    println!("{}", table(&reports));
    println!("records: {}", out.display());
    let Some(protected) = reports.iter().find(|r| r.config.min_failovers > 0) else {
        return ExitCode::SUCCESS;
    };
    if protected.goal_met() {
        println!("{}: goal met", protected.config.name);
        ExitCode::SUCCESS
    } else {
        println!(
            "{}: GOAL MISSED: {}",
            protected.config.name,
            protected.failures().join("; ")
        );
        ExitCode::FAILURE
    }
}
