//! The cluster torture run (`make torture`; a short run in `cargo test`): a 3+3 Redis Cluster
//! on loopback, quarantine on, one master's wall clock shifted by an LD_PRELOAD shim
//! ([`skew`]). Workers ([`workers`]) hold fenced leases on lock keys that sit in the lowest
//! slot of each master, two workers per contended lock and one on a lock mostly left free
//! (no key: only the token floor carries its tokens across a move), each section appending
//! its token to the lock's log key with LEASE.EXEC; the injector ([`faults`]) meanwhile moves those slots between
//! masters with `redis-cli --cluster reshard` (with filler keys, so the lock and log keys can
//! travel in different batches), fails masters over with CLUSTER FAILOVER and kill -9 (never
//! the skewed one), and brings killed nodes back. Then [`analyse`] counts overlapping
//! sections, stale writes accepted (a log entry below an earlier one), tokens repeated or
//! going backwards (per lock, in grant order), lost replies, and split data keys (a slot with
//! keys on two masters, or left open).

pub mod faults;
pub mod skew;
pub mod workers;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis_lease_testkit::cluster::{cluster_nodes, key_slot, Cluster};
use redis_lease_testkit::Options;

use faults::FaultLog;
use workers::{Plan, Section, Shared};

#[derive(Clone, Debug)]
pub struct Config {
    /// How long faults are injected.
    pub time: Duration,
    /// The shift of the skewed master's wall clock, ms.
    pub skew_ms: i64,
    pub ttl: Duration,
    /// `lease.quarantine` on every node.
    pub quarantine: Duration,
    /// Validity a worker leaves unused (above the skew: a held lease moved to the skewed
    /// master ends that much earlier there).
    pub slack: Duration,
    /// Where the shim is built and the record kept.
    pub out: PathBuf,
}

impl Config {
    pub fn new(time: Duration, out: PathBuf) -> Config {
        Config {
            time,
            skew_ms: 1500,
            ttl: Duration::from_millis(3000),
            quarantine: Duration::from_millis(3000),
            slack: Duration::from_millis(2000),
            out,
        }
    }
}

/// The figures of a run.
#[derive(Clone, Debug, Default)]
pub struct Report {
    pub elapsed: Duration,
    pub sections: usize,
    pub writes_ok: u64,
    pub writes_fenced: u64,
    pub errors: u64,
    pub overlaps: usize,
    pub stale_accepted: usize,
    pub token_repeats: usize,
    pub token_backwards: usize,
    pub lost_replies: u64,
    pub split_data_keys: usize,
    pub faults: FaultLog,
    pub overlap_samples: Vec<String>,
    pub token_samples: Vec<String>,
}

impl Report {
    /// Zero of each failure, and faults that really happened.
    pub fn failures(&self) -> Vec<String> {
        let mut f = Vec::new();
        let zero = [
            ("overlaps", self.overlaps as u64),
            ("stale writes accepted", self.stale_accepted as u64),
            ("tokens repeated", self.token_repeats as u64),
            ("tokens backward", self.token_backwards as u64),
            ("lost replies", self.lost_replies),
            ("split data keys", self.split_data_keys as u64),
            ("failed reshards", self.faults.reshards_failed.len() as u64),
        ];
        for (what, n) in zero {
            if n != 0 {
                f.push(format!("{what}: {n}"));
            }
        }
        if let Some(s) = &self.faults.stuck {
            f.push(format!("the cluster did not heal: {s}"));
        }
        if self.faults.lock_slots_moved == 0 {
            f.push("no slot holding locks moved".into());
        }
        if self.sections == 0 {
            f.push("no section".into());
        }
        f
    }

    pub fn table(&self) -> String {
        let l = &self.faults;
        format!(
            "| run | s | reshards (lock slots moved) | CLUSTER FAILOVER | kill -9 | sections | fenced writes ok / refused | overlaps | stale accepted | tokens repeated / backward | lost replies | split data keys | failed reshards |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|---|\n\
             | cluster 3+3, skew +{} ms, quarantine {} ms | {:.0} | {} ({}) | {} | {} | {} | {} / {} | {} | {} | {} / {} | {} | {} | {} |",
            Config::new(Duration::ZERO, PathBuf::new()).skew_ms,
            Config::new(Duration::ZERO, PathBuf::new()).quarantine.as_millis(),
            self.elapsed.as_secs_f64(),
            l.reshards,
            l.lock_slots_moved,
            l.failovers,
            l.kills,
            self.sections,
            self.writes_ok,
            self.writes_fenced,
            self.overlaps,
            self.stale_accepted,
            self.token_repeats,
            self.token_backwards,
            self.lost_replies,
            self.split_data_keys,
            l.reshards_failed.len()
        )
    }
}

/// A hash tag whose slot is `slot`.
fn tag_for(slot: u16) -> String {
    (0u64..)
        .map(|n| format!("t{n}"))
        .find(|t| key_slot(t.as_bytes()) == slot)
        .unwrap()
}

/// Per lock, sections in grant order: overlaps, and tokens repeated or going backwards.
fn analyse_sections(sections: &[Section], r: &mut Report) {
    let locks: std::collections::BTreeSet<usize> = sections.iter().map(|s| s.lock).collect();
    for l in locks {
        let mut s: Vec<&Section> = sections.iter().filter(|s| s.lock == l).collect();
        s.sort_by_key(|x| x.entered);
        // A worker whose release failed (its node was killed) takes its own hold again and
        // gets the same token: the same hold, not a repeat. A repeat is another worker's.
        let mut seen = std::collections::HashMap::new();
        let mut top = i64::MIN;
        for (i, a) in s.iter().enumerate() {
            for b in &s[i + 1..] {
                if b.entered >= a.left {
                    break;
                }
                r.overlaps += 1;
                r.overlap_samples.push(format!("lock {l}: {a:?} and {b:?}"));
            }
            let first = *seen.entry(a.token).or_insert(a.worker);
            if first != a.worker {
                r.token_repeats += 1;
                r.token_samples
                    .push(format!("lock {l}: token {} again", a.token));
            } else if a.token < top {
                r.token_backwards += 1;
                r.token_samples
                    .push(format!("lock {l}: token {} after {top}", a.token));
            }
            top = top.max(a.token);
        }
    }
}

/// Log entries below an earlier one: a stale write got through the fence.
fn stale(log: &[i64]) -> usize {
    let mut top = i64::MIN;
    let mut n = 0;
    for t in log {
        if *t < top {
            n += 1;
        }
        top = top.max(*t);
    }
    n
}

/// Slots holding locks with keys on more than one master, or left open (migrating/importing).
fn split_keys(cluster: &Cluster, tracked: &[u16]) -> usize {
    let ms = faults::masters(cluster, 0);
    let mut split = 0;
    for s in tracked {
        let holding = ms
            .iter()
            .filter(|m| {
                let Ok(mut c) = cluster.node(m.port).client().get_connection() else {
                    return false;
                };
                let n: i64 = redis::cmd("CLUSTER")
                    .arg("COUNTKEYSINSLOT")
                    .arg(*s)
                    .query(&mut c)
                    .unwrap_or(0);
                n > 0
            })
            .count();
        split += usize::from(holding > 1);
    }
    for m in &ms {
        let Ok(mut c) = cluster.node(m.port).client().get_connection() else {
            continue;
        };
        let text: String = redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut c)
            .unwrap_or_default();
        let myself = text.lines().find(|l| l.contains("myself")).unwrap_or("");
        split += myself.matches('[').count();
    }
    split
}

/// One run, end to end.
pub fn run(c: &Config) -> Report {
    let start = Instant::now();
    std::fs::create_dir_all(&c.out).expect("the record's directory");
    let shim = skew::build(&c.out).expect("the clock shim");
    let q = c.quarantine.as_millis().to_string();
    // A replica takes over however long its link was down (one just back from a kill).
    let base = Options::default()
        .module_arg("quarantine", &q)
        .arg("cluster-replica-validity-factor", "0");
    let skewed = base
        .clone()
        .env("LD_PRELOAD", shim.to_str().unwrap())
        .env("REDIS_LEASE_SKEW_MS", &c.skew_ms.to_string());
    let mut opts = vec![skewed];
    opts.extend(std::iter::repeat_n(base, 5));
    let mut cluster = Cluster::start_each(opts);
    let skewed_port = cluster.nodes[0].port;

    // Locks in the lowest slot of each master, with filler keys so reshard moves the slot's
    // keys in several batches.
    let mut tracked: Vec<u16> = faults::masters(&cluster, 0)
        .iter()
        .map(|m| m.slots.iter().map(|(a, _)| *a).min().unwrap())
        .collect();
    tracked.sort();
    let mut locks = Vec::new();
    let mut admin = workers::connect(&Plan {
        urls: cluster.urls(),
        locks: vec![],
        ttl: c.ttl,
        slack: c.slack,
        reply_timeout: Duration::from_secs(10),
    });
    for s in &tracked {
        let tag = tag_for(*s);
        for i in 0..25 {
            let _: () = redis::cmd("SET")
                .arg(format!("{{{tag}}}.filler{i}"))
                .arg(i)
                .query(&mut admin)
                .unwrap();
        }
        locks.push(format!("{{{tag}}}.a"));
        locks.push(format!("{{{tag}}}.b"));
        locks.push(format!("{{{tag}}}.idle"));
    }
    let plan = Plan {
        urls: cluster.urls(),
        locks: locks.clone(),
        ttl: c.ttl,
        slack: c.slack,
        reply_timeout: Duration::from_secs(10),
    };
    // Grants wait out the quarantine of a fresh start.
    sleep(c.quarantine);
    let shared = Arc::new(Shared {
        sections: Mutex::new(Vec::new()),
        counts: Default::default(),
        stop: AtomicBool::new(false),
    });
    let mut threads = Vec::new();
    for (l, name) in locks.iter().enumerate() {
        let (n, pause) = if name.ends_with(".idle") {
            (1, (150, 400))
        } else {
            (2, (0, 30))
        };
        for w in 0..n {
            let (p, s) = (plan.clone(), shared.clone());
            threads.push(std::thread::spawn(move || {
                workers::work(p, l, l * 2 + w, pause, s)
            }));
        }
    }
    let mut log = FaultLog::default();
    let mut step = 0usize;
    let until = Instant::now() + c.time;
    while Instant::now() < until && log.stuck.is_none() {
        match step % 5 {
            0 | 1 | 3 => faults::reshard(&cluster, &tracked, &mut log),
            2 => faults::fail_over(&mut cluster, false, skewed_port, &mut log),
            _ => faults::fail_over(&mut cluster, true, skewed_port, &mut log),
        }
        step += 1;
        eprintln!(
            "cluster torture: {:.0} s: {} reshards ({} failed), {} failovers, {} kills{}",
            start.elapsed().as_secs_f64(),
            log.reshards,
            log.reshards_failed.len(),
            log.failovers,
            log.kills,
            log.stuck
                .as_deref()
                .map(|s| format!(", STUCK: {s}"))
                .unwrap_or_default()
        );
        sleep(Duration::from_millis(300));
    }
    shared.stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    if log.stuck.is_none() {
        if let Err(e) = faults::healthy(skewed_port, Duration::from_secs(40)) {
            log.stuck = Some(e);
        }
    }
    let mut r = Report {
        faults: log,
        ..Report::default()
    };
    let sections = shared.sections.lock().unwrap().clone();
    r.sections = sections.len();
    analyse_sections(&sections, &mut r);
    let counts = &shared.counts;
    r.writes_ok = counts.writes_ok.load(Ordering::Relaxed);
    r.writes_fenced = counts.writes_fenced.load(Ordering::Relaxed);
    r.lost_replies = counts.lost_replies.load(Ordering::Relaxed);
    r.errors = counts.errors.load(Ordering::Relaxed);
    let mut reader = workers::connect(&plan);
    for l in &locks {
        r.stale_accepted += stale(&workers::read_log(&mut reader, l));
    }
    r.split_data_keys = split_keys(&cluster, &tracked);
    let record: String = sections
        .iter()
        .map(|s| {
            format!(
                "{} {} {} {:?} {:?}\n",
                s.lock,
                s.worker,
                s.token,
                s.entered - start,
                s.left - start
            )
        })
        .collect();
    let _ = std::fs::write(c.out.join("sections.txt"), record);
    for n in &cluster.nodes {
        let _ = std::fs::write(c.out.join(format!("node-{}.log", n.port)), n.log());
    }
    let _ = cluster_nodes;
    r.elapsed = start.elapsed();
    r
}
