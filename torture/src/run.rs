//! One configuration's run: the group, the workers, the injector, and the report.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis_lease_testkit::Options;

use crate::analysis::{analyse, overlapping_pairs, Figures};
use crate::faults::{self, FaultLog, Injector};
use crate::group::{Group, SentinelTiming};
use crate::resource::Section;
use crate::workers::{self, Shared, Stats};

/// One configuration.
#[derive(Clone, Debug)]
pub struct Config {
    pub name: String,
    /// `lease.quarantine` on every server (zero: off).
    pub quarantine: Duration,
    /// Replica acknowledgements the workers ask for.
    pub replicas: u32,
    pub ttl: Duration,
    pub workers: usize,
    /// Fault for at least this long, until `min_failovers` were forced, at most `max_time`.
    pub min_time: Duration,
    pub max_time: Duration,
    pub min_failovers: usize,
    pub timing: SentinelTiming,
    /// Where to keep the record (timeline, sections, server and sentinel logs).
    pub out: Option<PathBuf>,
}

impl Config {
    /// Sentinel timing of every run: `down-after-milliseconds 1000`, `failover-timeout 1500`
    /// (so a sentinel may start the next failover 3 s after the last), pings every 500 ms.
    pub const TIMING: SentinelTiming = SentinelTiming {
        down_after: Duration::from_millis(1000),
        failover_timeout: Duration::from_millis(1500),
        ping_period: Duration::from_millis(500),
        parallel_syncs: 1,
    };

    /// The workers' ttl: longer than most failovers take here (about 2.3 s), so that a holder
    /// can still be inside when the promoted replica starts granting. (With a ttl shorter
    /// than every failover, a grant the promoted replica never saw has lapsed before anyone
    /// reaches it, protected or not.)
    pub const TTL: Duration = Duration::from_millis(3000);

    /// Quarantine off, no replica acknowledgements: the problem.
    pub fn unprotected(min_time: Duration) -> Config {
        Config {
            name: "quarantine off, replicas 0".into(),
            quarantine: Duration::ZERO,
            replicas: 0,
            ttl: Self::TTL,
            workers: 5,
            min_time,
            max_time: min_time,
            min_failovers: 0,
            timing: Self::TIMING,
            out: None,
        }
    }

    /// Quarantine equal to the ttl, grants and renewals acknowledged by a replica.
    pub fn protected(min_time: Duration, min_failovers: usize) -> Config {
        Config {
            name: format!("quarantine {}, replicas 1", Self::TTL.as_millis()),
            quarantine: Self::TTL,
            replicas: 1,
            ttl: Self::TTL,
            workers: 5,
            min_time,
            max_time: min_time * 2,
            min_failovers,
            timing: Self::TIMING,
            out: None,
        }
    }
}

/// What one run found.
#[derive(Clone, Debug)]
pub struct Report {
    pub config: Config,
    pub figures: Figures,
    pub faults: FaultLog,
    pub workers: Stats,
    pub elapsed: Duration,
    /// `+switch-master` and `+tilt` in the sentinels' logs (the most any one logged).
    pub switches: usize,
    pub tilts: usize,
    /// The 1-minute load average at the start and at the end.
    pub load: (String, String),
    /// The first overlapping pairs, described (evidence).
    pub overlap_samples: Vec<String>,
}

impl Report {
    /// Configuration 2's goal: safe, enough failovers, every call answered, work got done.
    pub fn goal_met(&self) -> bool {
        self.failures().is_empty()
    }

    /// What keeps the goal from being met, in words.
    pub fn failures(&self) -> Vec<String> {
        let f = &self.figures;
        let mut out = vec![];
        if f.overlaps > 0 {
            out.push(format!("{} overlapping sections", f.overlaps));
        }
        if f.stale_accepted > 0 {
            out.push(format!("{} stale writes accepted", f.stale_accepted));
        }
        if f.token_repeats + f.token_backwards > 0 {
            out.push(format!(
                "tokens repeated {} / backwards {}",
                f.token_repeats, f.token_backwards
            ));
        }
        if self.faults.forced() < self.config.min_failovers {
            out.push(format!(
                "{} failovers forced, {} wanted",
                self.faults.forced(),
                self.config.min_failovers
            ));
        }
        if self.workers.hung > 0 {
            out.push(format!("{} client calls never answered", self.workers.hung));
        }
        if let Some(s) = &self.faults.stuck {
            out.push(format!("injector stopped: {s}"));
        }
        if f.completed == 0 {
            out.push("no section completed".into());
        }
        out
    }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_default()
}

fn describe(s: &Section, t0: Instant) -> String {
    format!(
        "section {} worker {} token {} via {} inside {:.3}..{:.3} s ({:?})",
        s.id,
        s.worker,
        s.token,
        s.via,
        (s.entered - t0).as_secs_f64(),
        (s.left - t0).as_secs_f64(),
        s.outcome
    )
}

/// Runs one configuration on a group of its own.
pub async fn run(config: Config) -> Report {
    let load_start = load();
    let base = Options::default()
        .arg("repl-diskless-sync-delay", "0")
        .module_arg("quarantine", &config.quarantine.as_millis().to_string());
    let timing = config.timing;
    let group = tokio::task::spawn_blocking(move || Group::start(base, timing))
        .await
        .expect("the group starts");
    let shared = Arc::new(Shared::new());
    let plan = workers::Plan {
        url: group.url(),
        key: "torture".into(),
        ttl: config.ttl,
        replicas: config.replicas,
        replica_timeout: Duration::from_millis(500),
        wait: Duration::from_secs(5),
        write_every: Duration::from_millis(25),
        slack: Duration::from_millis(50),
    };
    let t0 = Instant::now();
    let handles: Vec<_> = (0..config.workers)
        .map(|i| tokio::spawn(workers::worker(i, plan.clone(), shared.clone())))
        .collect();
    let key = plan.key.clone();
    let holder = {
        let shared = shared.clone();
        Box::new(move || shared.inside())
    };
    let fault_plan = faults::Plan {
        min_time: config.min_time,
        max_time: config.max_time,
        min_failovers: config.min_failovers,
        patience: Duration::from_secs(60),
    };
    let (group, faults) = tokio::task::spawn_blocking(move || {
        Injector::new(group, &key, holder, t0, fault_plan).run()
    })
    .await
    .expect("the injector finishes");
    // A last calm second, then the workers stop (each within its wait and one section).
    tokio::time::sleep(Duration::from_secs(1)).await;
    shared.stop.store(true, Ordering::Relaxed);
    let mut stats = Stats::default();
    for h in handles {
        match tokio::time::timeout(Duration::from_secs(90), h).await {
            Ok(Ok(s)) => stats.add(&s),
            Ok(Err(e)) => panic!("a worker panicked: {e}"),
            Err(_) => {
                stats.hung += 1;
                stats.last_error = Some("a worker did not stop".into());
            }
        }
    }
    let elapsed = t0.elapsed();
    let (writes, sections) = shared.journal.snapshot();
    let figures = analyse(&sections, &writes, (t0, t0 + elapsed));
    let overlap_samples = overlapping_pairs(&sections)
        .iter()
        .take(10)
        .map(|(a, b)| format!("{} / {}", describe(a, t0), describe(b, t0)))
        .collect();
    let report = Report {
        switches: group.sentinel_events("+switch-master"),
        tilts: group.sentinel_events("+tilt"),
        config,
        figures,
        faults,
        workers: stats,
        elapsed,
        load: (load_start, load()),
        overlap_samples,
    };
    if let Some(dir) = &report.config.out {
        keep(dir, &report, &group, &sections, t0);
    }
    tokio::task::spawn_blocking(move || drop(group))
        .await
        .expect("the group stops");
    report
}

/// Writes the run's record into `dir`.
fn keep(dir: &std::path::Path, report: &Report, group: &Group, sections: &[Section], t0: Instant) {
    // Only this run's files (ports differ from run to run).
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::create_dir_all(dir);
    group.save_logs(dir);
    let _ = std::fs::write(
        dir.join("timeline.txt"),
        report.faults.events.join("\n") + "\n",
    );
    let mut sorted: Vec<&Section> = sections.iter().collect();
    sorted.sort_by_key(|s| s.entered);
    let lines: Vec<String> = sorted.iter().map(|s| describe(s, t0)).collect();
    let _ = std::fs::write(dir.join("sections.txt"), lines.join("\n") + "\n");
    let _ = std::fs::write(
        dir.join("overlaps.txt"),
        report.overlap_samples.join("\n") + "\n",
    );
}
