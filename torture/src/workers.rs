//! The workers: tasks that contend for one write lock through Sentinel, each with a client of
//! its own, and write their token to the resource inside each critical section.
//!
//! A section: take the lock, check the guard holds (the section's start), then a number of
//! writes a few ms apart, each after a check that the lease is still valid with `slack` to
//! spare (a careful holder leaves room for its own write), a last check (the section's end),
//! release. A lost lease or a refused write ends the section early.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::Rng;
use redis_lease_client::{Client, Error, LeaseTiming, LockGuard, LockOptions, RetryPolicy};

use crate::resource::{Journal, Outcome, Section};

/// How the workers use the lock.
#[derive(Clone, Debug)]
pub struct Plan {
    pub url: String,
    pub key: String,
    pub ttl: Duration,
    pub replicas: u32,
    pub replica_timeout: Duration,
    /// How long one acquisition waits (inside the server, with retries through failovers).
    pub wait: Duration,
    /// Time between writes inside a section.
    pub write_every: Duration,
    /// How much validity must be left for a write.
    pub slack: Duration,
}

impl Plan {
    fn options(&self) -> LockOptions {
        LockOptions {
            timing: LeaseTiming::new(self.ttl).expect("a valid ttl"),
            retry: RetryPolicy {
                base_delay: Duration::from_millis(20),
                max_delay: Duration::from_millis(250),
                budget: Duration::from_secs(10),
            },
            replicas: self.replicas,
            replica_timeout: self.replica_timeout,
            max_hold: None,
        }
    }

    /// How many writes the next section makes: mostly a few (under a renewal period), some
    /// spanning a renewal or two, some spanning many (a holder that is inside when a fault
    /// strikes is what the faults are for).
    fn writes(&self) -> u32 {
        let mut rng = rand::rng();
        match rng.random_range(0..100) {
            0..70 => rng.random_range(1..=4),
            70..90 => rng.random_range(12..=48),
            _ => rng.random_range(104..=140),
        }
    }
}

/// What one worker saw, besides its sections.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub attempts: u64,
    pub granted: u64,
    /// Acquisitions not granted within the wait.
    pub not_granted: u64,
    /// Grants too few replicas acknowledged (released by the client).
    pub not_replicated: u64,
    /// Acquisitions that gave up on transient failures.
    pub unavailable: u64,
    pub other_errors: u64,
    /// Grants already lost at the first check.
    pub lost_at_entry: u64,
    /// Calls that never answered within the harness's own limit (a client bug).
    pub hung: u64,
    pub last_error: Option<String>,
}

impl Stats {
    pub fn add(&mut self, o: &Stats) {
        self.attempts += o.attempts;
        self.granted += o.granted;
        self.not_granted += o.not_granted;
        self.not_replicated += o.not_replicated;
        self.unavailable += o.unavailable;
        self.other_errors += o.other_errors;
        self.lost_at_entry += o.lost_at_entry;
        self.hung += o.hung;
        if o.last_error.is_some() {
            self.last_error.clone_from(&o.last_error);
        }
    }
}

/// Shared by the workers of one run.
pub struct Shared {
    pub journal: Journal,
    pub next_section: AtomicU64,
    pub stop: AtomicBool,
    /// The section in progress: its token and when it plans to end (for the injector, which
    /// strikes when a long one begins).
    pub inside: Mutex<Option<(u64, Instant)>>,
}

impl Shared {
    pub fn new() -> Shared {
        Shared {
            journal: Journal::default(),
            next_section: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            inside: Mutex::new(None),
        }
    }

    pub fn inside(&self) -> Option<(u64, Instant)> {
        *self.inside.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set_inside(&self, v: Option<(u64, Instant)>) {
        *self.inside.lock().unwrap_or_else(|e| e.into_inner()) = v;
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared::new()
    }
}

/// Whether the guard is still valid with `slack` to spare.
fn valid(g: &LockGuard, slack: Duration) -> bool {
    g.valid_until().is_some_and(|v| v > Instant::now() + slack)
}

/// The harness's own limit on any one client call (far above the client's own timeouts).
const HANG: Duration = Duration::from_secs(45);

pub async fn worker(id: usize, plan: Plan, shared: Arc<Shared>) -> Stats {
    let mut stats = Stats::default();
    let client = loop {
        if shared.stop.load(Ordering::Relaxed) {
            return stats;
        }
        match tokio::time::timeout(HANG, Client::open(&plan.url)).await {
            Ok(Ok(c)) => break c,
            Ok(Err(e)) => stats.last_error = Some(format!("connect: {e}")),
            Err(_) => stats.hung += 1,
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let lock = client.rwlock(plan.key.clone()).with_options(plan.options());
    while !shared.stop.load(Ordering::Relaxed) {
        stats.attempts += 1;
        let guard =
            match tokio::time::timeout(plan.wait + HANG, lock.write_timeout(plan.wait)).await {
                Err(_) => {
                    stats.hung += 1;
                    stats.last_error = Some("an acquisition never answered".into());
                    continue;
                }
                Ok(Ok(Some(g))) => g,
                Ok(Ok(None)) => {
                    stats.not_granted += 1;
                    continue;
                }
                Ok(Err(e)) => {
                    match &e {
                        Error::NotReplicated { .. } => stats.not_replicated += 1,
                        Error::Unavailable { .. } => stats.unavailable += 1,
                        _ => stats.other_errors += 1,
                    }
                    stats.last_error = Some(e.to_string());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
        stats.granted += 1;
        let via = match client.master_addr() {
            Some(redis::ConnectionAddr::Tcp(_, port)) => port,
            _ => 0,
        };
        section(id, via, &plan, &shared, &guard, &mut stats).await;
        if tokio::time::timeout(HANG, guard.release()).await.is_err() {
            stats.hung += 1;
            stats.last_error = Some("a release never answered".into());
        }
        // A moment for others to get in line.
        let pause = rand::rng().random_range(0..5);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    stats
}

async fn section(
    id: usize,
    via: u16,
    plan: &Plan,
    shared: &Shared,
    g: &LockGuard,
    stats: &mut Stats,
) {
    // The time is taken before each check: a check that passes proves the lease valid then.
    let entered = Instant::now();
    if !valid(g, plan.slack) {
        stats.lost_at_entry += 1;
        return;
    }
    let sid = shared.next_section.fetch_add(1, Ordering::Relaxed);
    let token = g.token();
    let mut left = entered;
    let mut outcome = Outcome::Completed;
    let writes = plan.writes();
    shared.set_inside(Some((token, entered + plan.write_every * writes)));
    for i in 0..writes {
        if i > 0 {
            tokio::time::sleep(plan.write_every).await;
        }
        let t = Instant::now();
        if !valid(g, plan.slack) {
            outcome = Outcome::Lost;
            break;
        }
        left = t;
        if !shared.journal.write(sid, token) {
            outcome = Outcome::Fenced;
            break;
        }
    }
    if outcome == Outcome::Completed {
        tokio::time::sleep(plan.write_every).await;
        let t = Instant::now();
        if valid(g, plan.slack) {
            left = t;
        } else {
            outcome = Outcome::Lost;
        }
    }
    shared.set_inside(None);
    shared.journal.close(Section {
        id: sid,
        worker: id,
        token,
        via,
        entered,
        left,
        outcome,
    });
}
