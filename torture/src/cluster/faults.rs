//! The faults of the cluster run: `redis-cli --cluster reshard` of a slot that holds locks (to
//! another master and back), a coordinated `CLUSTER FAILOVER`, and `kill -9` of a master (its
//! replica takes over; the killed node comes back as a replica).

use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use rand::seq::IndexedRandom;
use redis_lease_testkit::cluster::{cluster_nodes, Cluster, NodeLine};

/// What the injector did.
#[derive(Clone, Debug, Default)]
pub struct FaultLog {
    pub reshards: usize,
    /// Slots moved by those reshards that held locks (the source's lowest slot).
    pub lock_slots_moved: usize,
    pub reshards_failed: Vec<String>,
    pub failovers: usize,
    pub kills: usize,
    /// The cluster did not heal in time (what was awaited).
    pub stuck: Option<String>,
}

/// The masters with slots, as node `via` sees them.
pub fn masters(cluster: &Cluster, via: usize) -> Vec<NodeLine> {
    let mut c = cluster.nodes[via].conn();
    cluster_nodes(&mut c)
        .into_iter()
        .filter(|n| n.master && !n.slots.is_empty())
        .collect()
}

fn lowest_slot(n: &NodeLine) -> u16 {
    n.slots.iter().map(|(a, _)| *a).min().unwrap_or(u16::MAX)
}

/// `redis-cli --cluster check` until it passes (every node agrees, no open slot).
pub fn healthy(port: u16, limit: Duration) -> Result<(), String> {
    let start = Instant::now();
    loop {
        let out = Command::new("redis-cli")
            .args(["--cluster", "check", &format!("127.0.0.1:{port}")])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("redis-cli: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if out.status.success() && !text.contains("[WARNING]") && !text.contains("[ERR]") {
            return Ok(());
        }
        if start.elapsed() > limit {
            return Err(format!("cluster check after {limit:?}:\n{text}"));
        }
        sleep(Duration::from_millis(250));
    }
}

/// Moves one slot from a master whose lowest slot holds locks to another master (reshard
/// moves a source's lowest slots first).
pub fn reshard(cluster: &Cluster, tracked: &[u16], log: &mut FaultLog) {
    let ms = masters(cluster, 0);
    let sources: Vec<&NodeLine> = ms
        .iter()
        .filter(|m| tracked.contains(&lowest_slot(m)))
        .collect();
    let mut rng = rand::rng();
    let Some(src) = sources.choose(&mut rng) else {
        return;
    };
    let others: Vec<&NodeLine> = ms.iter().filter(|m| m.id != src.id).collect();
    let Some(dst) = others.choose(&mut rng) else {
        return;
    };
    if let Err(e) = healthy(src.port, Duration::from_secs(30)) {
        log.stuck = Some(e);
        return;
    }
    let out = Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{}", src.port)])
        .args(["--cluster-from", &src.id, "--cluster-to", &dst.id])
        .args(["--cluster-slots", "1", "--cluster-yes"])
        .stdin(Stdio::null())
        .output();
    log.reshards += 1;
    match out {
        Ok(o) if o.status.success() => log.lock_slots_moved += 1,
        Ok(o) => log.reshards_failed.push(format!(
            "slot {} {} -> {}: {}",
            lowest_slot(src),
            src.port,
            dst.port,
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .filter(|l| l.contains("ERR") || l.contains("BUSY"))
                .collect::<Vec<_>>()
                .join(" | ")
        )),
        Err(e) => log.reshards_failed.push(format!("redis-cli: {e}")),
    }
}

fn index_of(cluster: &Cluster, port: u16) -> usize {
    cluster.nodes.iter().position(|n| n.port == port).unwrap()
}

fn role(cluster: &Cluster, port: u16) -> Option<String> {
    let mut c = cluster.node(port).client().get_connection().ok()?;
    redis_lease_testkit::info::info_field(&mut c, "replication", "role")
}

fn await_master(cluster: &Cluster, port: u16, log: &mut FaultLog) -> bool {
    let start = Instant::now();
    while role(cluster, port).as_deref() != Some("master") {
        if start.elapsed() > Duration::from_secs(30) {
            log.stuck = Some(format!("{port} never became master"));
            return false;
        }
        sleep(Duration::from_millis(100));
    }
    true
}

/// The replica of a random master (not `spare`, when given) takes over: coordinated, or
/// after the master is killed with SIGKILL (then the node comes back, as a replica).
pub fn fail_over(cluster: &mut Cluster, kill: bool, spare: u16, log: &mut FaultLog) {
    let ms = masters(cluster, 0);
    let all = cluster_nodes(&mut cluster.nodes[0].conn());
    let mut rng = rand::rng();
    let candidates: Vec<&NodeLine> = ms
        .iter()
        .filter(|m| !kill || m.port != spare)
        .filter(|m| all.iter().any(|n| !n.master && n.master_id == m.id))
        .collect();
    let Some(m) = candidates.choose(&mut rng) else {
        return;
    };
    let Some(r) = all.iter().find(|n| !n.master && n.master_id == m.id) else {
        return;
    };
    if let Err(e) = healthy(m.port, Duration::from_secs(30)) {
        log.stuck = Some(e);
        return;
    }
    // The replica must be in sync (a node just back from a kill is still loading its copy),
    // or it may lack acknowledged grants.
    let start = Instant::now();
    loop {
        let up = cluster
            .node(r.port)
            .client()
            .get_connection()
            .ok()
            .and_then(|mut c| {
                redis_lease_testkit::info::info_field(&mut c, "replication", "master_link_status")
            });
        let acked: i64 = cluster
            .node(m.port)
            .client()
            .get_connection()
            .ok()
            .and_then(|mut c| redis::cmd("WAIT").arg(1).arg(500).query(&mut c).ok())
            .unwrap_or(0);
        if up.as_deref() == Some("up") && acked >= 1 {
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            log.stuck = Some(format!("replica {} of {} never in sync", r.port, m.port));
            return;
        }
        sleep(Duration::from_millis(100));
    }
    if kill {
        let i = index_of(cluster, m.port);
        cluster.nodes[i].kill9();
        log.kills += 1;
        if !await_master(cluster, r.port, log) {
            return;
        }
        cluster.nodes[i].restart(None);
    } else {
        let mut rc = cluster.node(r.port).conn();
        let ok: redis::RedisResult<()> = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut rc);
        if ok.is_err() {
            return;
        }
        log.failovers += 1;
        if !await_master(cluster, r.port, log) {
            return;
        }
    }
    if let Err(e) = healthy(r.port, Duration::from_secs(40)) {
        log.stuck = Some(e);
    }
}
