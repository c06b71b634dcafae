//! The fault injector: one fault after another on the current master, each forcing a real
//! Sentinel failover, then the group brought back to one master with two linked replicas.
//!
//! * `Kill`: `kill -9` the master right after a grant; restart it (empty, same port and
//!   directory) as a replica of the new master.
//! * `Pause`: `SIGSTOP` the master right after a grant, for longer than down-after; `SIGCONT`
//!   it at a random moment up to 1.5 s after a replica was promoted, so that for a while it
//!   still believes it is the master (and serves what its clients queued) before Sentinel, or
//!   the injector after 1.5 s, makes it a replica.
//! * `FrozenLink`: `SIGSTOP` both replicas and cut their links (`CLIENT KILL TYPE replica` on
//!   the master: a stopped replica still receives into its socket buffer, and applies when
//!   continued, whatever the master sent on a live link), so the master's grants reach
//!   nobody; `kill -9` the master as soon as a section begun since plans to stay inside longer
//!   than a failover takes, `SIGCONT` the replicas: the promoted replica never saw that grant.
//! * `LaggingPromoted`: the same with one replica (`CLIENT KILL ADDR` of its link); when such
//!   a long section begins (its grant acknowledged by the other replica), `kill -9` the master
//!   *and* that other replica and `SIGCONT` the lagging one: Sentinel must promote the replica
//!   that missed the grant (the case replica acknowledgements alone cannot cover, and
//!   quarantine does).
//!
//! The injector is adversarial: it strikes while a holder is inside (a section planning to
//! stay 300 ms more; for the last two faults, it freezes replicas between sections and strikes
//! when a section planning 2.5 s more begins: the workers publish their plans), so that a
//! holder is inside through the failover. Between faults it waits until the group is whole
//! and the new master has made a grant again (after its quarantine), and a random calm of up
//! to 0.5 s.

use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::Rng;
use redis::Value;
use redis_lease_testkit::state::parse_lock_info;

use crate::group::{info_field, quick, role, Group, Role};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    Kill,
    Pause,
    FrozenLink,
    LaggingPromoted,
}

impl FaultKind {
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Kill,
        FaultKind::Pause,
        FaultKind::FrozenLink,
        FaultKind::LaggingPromoted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Kill => "kill -9",
            FaultKind::Pause => "SIGSTOP",
            FaultKind::FrozenLink => "frozen link + kill -9",
            FaultKind::LaggingPromoted => "lagging replica promoted",
        }
    }
}

/// The section in progress, as the workers report it: its token and when it plans to end.
pub type Holder = Box<dyn Fn() -> Option<(u64, Instant)> + Send>;

/// One fault and what followed.
#[derive(Clone, Debug)]
pub struct Fault {
    pub kind: FaultKind,
    /// Since the run started.
    pub at: Duration,
    pub old: u16,
    /// The master the sentinels named after it, if they named another one in time.
    pub new: Option<u16>,
    /// From the fault to every sentinel naming the new master.
    pub failover: Option<Duration>,
}

/// Everything the injector did.
#[derive(Clone, Debug, Default)]
pub struct FaultLog {
    pub faults: Vec<Fault>,
    /// A timeline (seconds since the run started), for the run's record.
    pub events: Vec<String>,
    /// Why the injector stopped early, if it did (the group did not come back together).
    pub stuck: Option<String>,
    /// Grants a `SIGSTOP`ped master made after it was continued, before it became a replica
    /// (split brain: another master had been promoted meanwhile).
    pub split_brain_grants: u64,
}

impl FaultLog {
    /// Faults that ended in a failover to another master.
    pub fn forced(&self) -> usize {
        self.faults.iter().filter(|f| f.new.is_some()).count()
    }

    pub fn forced_by(&self, kind: FaultKind) -> usize {
        self.faults
            .iter()
            .filter(|f| f.kind == kind && f.new.is_some())
            .count()
    }

    pub fn max_failover(&self) -> Option<Duration> {
        self.faults.iter().filter_map(|f| f.failover).max()
    }

    pub fn median_failover(&self) -> Option<Duration> {
        let mut t: Vec<Duration> = self.faults.iter().filter_map(|f| f.failover).collect();
        t.sort();
        t.get(t.len() / 2).copied()
    }
}

/// When to stop: after `min_time` once `min_failovers` were forced, or at `max_time`.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub min_time: Duration,
    pub max_time: Duration,
    pub min_failovers: usize,
    /// How long to wait for each failover, for grants to resume, for the group to heal.
    pub patience: Duration,
}

/// How long a section struck by `FrozenLink` or `LaggingPromoted` plans to stay inside: longer
/// than a failover, so that it is still inside when the promoted replica could grant again.
const LONG: Duration = Duration::from_millis(2500);

/// How long replicas stay frozen at most, waiting for such a section. Longer than
/// down-after: the sentinels see them down for a moment, and up again at their next ping.
const FROZEN: Duration = Duration::from_secs(3);

/// A process stopped with SIGSTOP, continued when dropped (also on a panic).
struct Stopped(Vec<u32>);

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: signals a process this harness started, by its pid.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

impl Stopped {
    fn new(pids: Vec<u32>) -> Stopped {
        for p in &pids {
            signal(*p, libc::SIGSTOP);
        }
        Stopped(pids)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        for p in &self.0 {
            signal(*p, libc::SIGCONT);
        }
    }
}

fn grants(port: u16) -> Option<u64> {
    info_field(port, "lease", "lease_grants_write")?
        .parse()
        .ok()
}

/// The token of the hold on `key`, as one connection to a server sees it.
struct HoldWatch {
    conn: Option<redis::Connection>,
    port: u16,
    key: String,
}

impl HoldWatch {
    fn new(port: u16, key: &str) -> HoldWatch {
        HoldWatch {
            conn: quick(port),
            port,
            key: key.to_string(),
        }
    }

    /// The highest token of a holder now (`None`: nobody holds, or no answer).
    fn token(&mut self) -> Option<i64> {
        if self.conn.is_none() {
            self.conn = quick(self.port);
        }
        let c = self.conn.as_mut()?;
        match redis::cmd("RWLOCK.INFO").arg(&self.key).query::<Value>(c) {
            Ok(v) => parse_lock_info(&v).holders.iter().map(|h| h.token).max(),
            Err(_) => {
                self.conn = None;
                None
            }
        }
    }

    /// Waits (at most `limit`) until a hold granted after the call began has lasted `held`;
    /// answers whether one did.
    fn held_for(&mut self, held: Duration, limit: Duration) -> bool {
        let start = Instant::now();
        let before = self.token();
        let mut current: Option<(i64, Instant)> = None;
        while start.elapsed() < limit {
            match self.token() {
                Some(t) if Some(t) != before => match current {
                    Some((c, since)) if c == t => {
                        if since.elapsed() >= held {
                            return true;
                        }
                    }
                    _ => current = Some((t, Instant::now())),
                },
                _ => current = None,
            }
            std::thread::sleep(Duration::from_millis(3));
        }
        false
    }
}

pub struct Injector {
    pub group: Group,
    key: String,
    holder: Holder,
    t0: Instant,
    plan: Plan,
    log: FaultLog,
}

impl Injector {
    pub fn new(group: Group, key: &str, holder: Holder, t0: Instant, plan: Plan) -> Injector {
        Injector {
            group,
            key: key.to_string(),
            holder,
            t0,
            plan,
            log: FaultLog::default(),
        }
    }

    fn event(&mut self, what: String) {
        let line = format!("{:9.3} {what}", self.t0.elapsed().as_secs_f64());
        self.log.events.push(line);
    }

    fn done(&self) -> bool {
        let t = self.t0.elapsed();
        t >= self.plan.max_time
            || (t >= self.plan.min_time && self.log.forced() >= self.plan.min_failovers)
    }

    /// Faults until the plan says stop; hands back the group (whole, nothing stopped).
    pub fn run(mut self) -> (Group, FaultLog) {
        let mut master = self
            .group
            .agreed_master()
            .expect("sentinels agree at the start");
        let mut i = 0;
        while !self.done() {
            if let Err(why) = self.calm(master) {
                self.event(format!("stopping: {why}"));
                self.log.stuck = Some(why);
                break;
            }
            if self.done() {
                break;
            }
            let kind = FaultKind::ALL[i % FaultKind::ALL.len()];
            let fault = match kind {
                FaultKind::Kill => self.kill(master),
                FaultKind::Pause => self.pause(master),
                FaultKind::FrozenLink => self.frozen_link(master),
                FaultKind::LaggingPromoted => self.lagging_promoted(master),
            };
            // None: the sentinels had moved on by themselves (a failover of their own); heal
            // finds the master they agree on, and the same kind of fault comes next.
            if let Some(fault) = fault {
                i += 1;
                if let Some(new) = fault.new {
                    master = new;
                }
                self.log.faults.push(fault);
            }
            match self.heal(master) {
                Ok(m) => master = m,
                Err(why) => {
                    self.event(format!("stopping: {why}"));
                    self.log.stuck = Some(why);
                    break;
                }
            }
        }
        (self.group, self.log)
    }

    /// Waits for a grant on `master` and a random calm.
    fn calm(&mut self, master: u16) -> Result<(), String> {
        let mut w = HoldWatch::new(master, &self.key);
        if !w.held_for(Duration::ZERO, self.plan.patience) {
            return Err(format!(
                "no grant on {master} within {:?}",
                self.plan.patience
            ));
        }
        let calm = rand::rng().random_range(0..500);
        std::thread::sleep(Duration::from_millis(calm));
        Ok(())
    }

    /// Waits (at most `limit`) for a section that plans to stay inside at least `inside` more
    /// (with `fresh`, one that was not in progress when the wait began); then answers whether
    /// `port` is still the master every sentinel names (else there is nothing to strike: the
    /// sentinels failed over by themselves).
    fn strike_point(&mut self, port: u16, inside: Duration, fresh: bool, limit: Duration) -> bool {
        let start = Instant::now();
        let before = (self.holder)().map(|(t, _)| t);
        let mut found = false;
        while start.elapsed() < limit {
            if let Some((token, until)) = (self.holder)() {
                if (!fresh || Some(token) != before) && until > Instant::now() + inside {
                    found = true;
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        if !found {
            self.event(format!(
                "no section planning {inside:?} more within {limit:?}"
            ));
        }
        let still = self.group.agreed_master() == Some(port)
            && matches!(role(port), Some(Role::Master { .. }));
        if !still {
            self.event(format!("{port} is no longer the master: no fault"));
        }
        still
    }

    /// Waits (at most 5 s) until no section is in progress, or the one in progress is about to
    /// end: replicas frozen from then on miss the next grant.
    fn between_sections(&self) {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            match (self.holder)() {
                Some((_, until)) if until > Instant::now() + Duration::from_millis(100) => {}
                _ => return,
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits until every sentinel names a master other than `old` that says it is one.
    fn wait_failover(&self, old: u16) -> Option<u16> {
        let start = Instant::now();
        while start.elapsed() < self.plan.patience {
            if let Some(p) = self.group.agreed_master() {
                if p != old && matches!(role(p), Some(Role::Master { .. })) {
                    return Some(p);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Waits until a server other than `old` says it is a master (the promotion).
    fn wait_promotion(&self, old: u16) -> Option<u16> {
        let others: Vec<u16> = self
            .group
            .ports()
            .into_iter()
            .filter(|p| *p != old)
            .collect();
        let start = Instant::now();
        while start.elapsed() < self.plan.patience {
            for p in &others {
                if matches!(role(*p), Some(Role::Master { .. })) {
                    return Some(*p);
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        None
    }

    fn record(&mut self, kind: FaultKind, at: Instant, old: u16, new: Option<u16>) -> Fault {
        let failover = new.map(|_| at.elapsed());
        match new {
            Some(n) => self.event(format!(
                "sentinels name {n} ({:?} after the fault)",
                failover.unwrap_or_default()
            )),
            None => self.event(format!("no failover from {old}")),
        }
        Fault {
            kind,
            at: at - self.t0,
            old,
            new,
            failover,
        }
    }

    fn kill(&mut self, old: u16) -> Option<Fault> {
        if !self.strike_point(
            old,
            Duration::from_millis(300),
            false,
            Duration::from_secs(5),
        ) {
            return None;
        }
        self.group.server_mut(old).kill9();
        let at = Instant::now();
        self.event(format!("kill -9 master {old}"));
        let new = self.wait_failover(old);
        let fault = self.record(FaultKind::Kill, at, old, new);
        self.bring_back(old, new);
        Some(fault)
    }

    fn pause(&mut self, old: u16) -> Option<Fault> {
        if !self.strike_point(
            old,
            Duration::from_millis(300),
            false,
            Duration::from_secs(5),
        ) {
            return None;
        }
        let pid = self.group.pid(old).expect("the master runs");
        let before = grants(old);
        let stopped = Stopped::new(vec![pid]);
        let at = Instant::now();
        self.event(format!("SIGSTOP master {old}"));
        let promoted = self.wait_promotion(old);
        if let Some(p) = promoted {
            self.event(format!("{p} promoted"));
            let extra = rand::rng().random_range(0..1500);
            std::thread::sleep(Duration::from_millis(extra));
        }
        drop(stopped);
        self.event(format!("SIGCONT {old}"));
        let new = if promoted.is_some() {
            self.wait_failover(old)
        } else {
            None
        };
        let fault = self.record(FaultKind::Pause, at, old, new);
        if let Some(new) = new {
            // Sentinel demotes it once it sees it again (its INFO period is 10 s); if it has
            // not in 1.5 s, do it.
            let start = Instant::now();
            let mut granted = None;
            while start.elapsed() < Duration::from_millis(1500) {
                if matches!(role(old), Some(Role::Replica { master, .. }) if master == new) {
                    break;
                }
                granted = grants(old).or(granted);
                std::thread::sleep(Duration::from_millis(20));
            }
            if let (Some(a), Some(b)) = (before, granted) {
                self.log.split_brain_grants += b.saturating_sub(a);
                self.event(format!("{old} granted {} since it was stopped", b - a));
            }
            if !matches!(role(old), Some(Role::Replica { master, .. }) if master == new) {
                self.group.replicaof(old, new);
                self.event(format!("REPLICAOF {new} sent to {old}"));
            } else {
                self.event(format!("{old} demoted by Sentinel"));
            }
        }
        Some(fault)
    }

    fn frozen_link(&mut self, old: u16) -> Option<Fault> {
        let replicas: Vec<u32> = self
            .group
            .ports()
            .into_iter()
            .filter(|p| *p != old)
            .filter_map(|p| self.group.pid(p))
            .collect();
        self.between_sections();
        let stopped = Stopped::new(replicas);
        // A stopped replica still receives what the master sends (into its socket buffer) and
        // applies it when continued: the links must be cut too.
        let cut = self.group.cut_links(old, None);
        self.event(format!("SIGSTOP both replicas of {old}, links cut: {cut}"));
        // Short of down-after, so that the sentinels still count the replicas as fine.
        if !self.strike_point(old, LONG, true, FROZEN) {
            return None;
        }
        self.group.server_mut(old).kill9();
        let at = Instant::now();
        drop(stopped);
        self.event(format!("kill -9 master {old}, SIGCONT replicas"));
        let new = self.wait_failover(old);
        let fault = self.record(FaultKind::FrozenLink, at, old, new);
        self.bring_back(old, new);
        Some(fault)
    }

    fn lagging_promoted(&mut self, old: u16) -> Option<Fault> {
        let mut replicas: Vec<u16> = self
            .group
            .ports()
            .into_iter()
            .filter(|p| *p != old)
            .collect();
        replicas.shuffle(&mut rand::rng());
        let (lagging, acked) = (replicas[0], replicas[1]);
        let pid = self.group.pid(lagging).expect("the replica runs");
        let link = self.group.link_addr(lagging);
        self.between_sections();
        let stopped = Stopped::new(vec![pid]);
        let cut = link.is_some() && self.group.cut_links(old, link.as_deref());
        self.event(format!("SIGSTOP replica {lagging}, its link cut: {cut}"));
        if !self.strike_point(old, LONG, true, FROZEN) {
            return None;
        }
        self.group.server_mut(old).kill9();
        self.group.server_mut(acked).kill9();
        let at = Instant::now();
        drop(stopped);
        self.event(format!(
            "kill -9 master {old} and replica {acked}, SIGCONT replica {lagging}"
        ));
        let new = self.wait_failover(old);
        let fault = self.record(FaultKind::LaggingPromoted, at, old, new);
        match new {
            Some(n) => {
                for p in [old, acked] {
                    if p != n {
                        self.group.restart_as_replica(p, n);
                        self.event(format!("{p} restarted as a replica of {n}"));
                    }
                }
            }
            None => {
                // Put back what there was: the old master, its replicas behind it.
                self.group.restart_as_master(old);
                self.group.restart_as_replica(acked, old);
                self.event(format!("{old} restarted as master, {acked} as its replica"));
            }
        }
        Some(fault)
    }

    /// Restarts a killed master: as a replica of the new one, or as the master again when
    /// no failover came.
    fn bring_back(&mut self, old: u16, new: Option<u16>) {
        match new {
            Some(n) => {
                self.group.restart_as_replica(old, n);
                self.event(format!("{old} restarted as a replica of {n}"));
            }
            None => {
                self.group.restart_as_master(old);
                self.event(format!("{old} restarted as master"));
            }
        }
    }

    /// Waits until the group is whole again under `master` (or whichever master the sentinels
    /// agree on); nudges stray servers with REPLICAOF when it takes long.
    fn heal(&mut self, master: u16) -> Result<u16, String> {
        let start = Instant::now();
        let mut nudged = false;
        let mut described = false;
        loop {
            if !described && start.elapsed() > Duration::from_secs(2) {
                described = true;
                let d = self.group.describe();
                self.event(format!("healing: {d}"));
            }
            let m = self.group.agreed_master().unwrap_or(master);
            if self.group.healthy(m) {
                if m != master {
                    self.event(format!("the sentinels moved on to {m}"));
                }
                self.event(format!("group whole under {m}"));
                return Ok(m);
            }
            if !nudged && start.elapsed() > self.plan.patience / 2 {
                nudged = true;
                for p in self.group.ports() {
                    if p != m
                        && !matches!(role(p), Some(Role::Replica { master, .. }) if master == m)
                    {
                        self.group.replicaof(p, m);
                        self.event(format!("REPLICAOF {m} sent to stray {p}"));
                    }
                }
            }
            if start.elapsed() > self.plan.patience {
                return Err(format!(
                    "the group did not heal in {:?}: {}",
                    self.plan.patience,
                    self.group.describe()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
