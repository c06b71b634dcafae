//! A Sentinel group on loopback for failover tests: one master and its replicas (all with the
//! module) watched by three sentinels (`testkit::sentinel`) with a short
//! `down-after-milliseconds`. Every process is stopped by its pid when the group is dropped.

use std::time::{Duration, Instant};

use redis_lease_testkit::sentinel::{sentinel_url, Sentinel, SentinelTiming};
use redis_lease_testkit::{Options, Server};

use super::replica::wait_replicas;

pub use redis_lease_testkit::sentinel::SERVICE;

/// Down after 1 s, pinged every 500 ms (below down-after: see `SentinelTiming`).
const TIMING: SentinelTiming = SentinelTiming {
    down_after: Duration::from_millis(1000),
    failover_timeout: Duration::from_millis(6000),
    ping_period: Duration::from_millis(500),
    parallel_syncs: 2,
};

/// How many (replicas, other sentinels) a sentinel knows, not counting those it thinks down.
fn known(s: &Sentinel) -> Option<(usize, usize)> {
    let (replicas, sentinels) = s.known()?;
    let up = |f: &&String| !f.contains("down");
    Some((
        replicas.values().filter(up).count(),
        sentinels.iter().filter(up).count(),
    ))
}

pub struct Group {
    /// The servers; the first was the master at the start.
    pub servers: Vec<Server>,
    pub sentinels: Vec<Sentinel>,
}

impl Group {
    /// A master with `replicas` replicas and three sentinels that know them all.
    pub fn start(replicas: usize) -> Group {
        let master = Server::with(Options::default());
        let mut servers = vec![];
        for _ in 0..replicas {
            servers.push(Server::with(
                Options::default().arg("replicaof", &format!("127.0.0.1 {}", master.port)),
            ));
        }
        wait_replicas(&master, replicas as i64);
        servers.insert(0, master);
        let sentinels: Vec<Sentinel> = (0..3)
            .map(|_| Sentinel::start(servers[0].port, TIMING))
            .collect();
        let g = Group { servers, sentinels };
        // Sentinels find the replicas through the master's INFO and each other through hello
        // messages (every 2 s): a failover needs both.
        let start = Instant::now();
        while !g.sentinels.iter().all(|s| known(s) == Some((replicas, 2))) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "sentinels did not find each other: {:?}",
                g.sentinels.iter().map(known).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        g
    }

    /// The `redis+sentinel://` URL of the group.
    pub fn url(&self) -> String {
        sentinel_url(&self.sentinels)
    }

    /// The master as the sentinels name it.
    pub fn master_port(&self) -> u16 {
        self.sentinels
            .iter()
            .find_map(Sentinel::master_port)
            .expect("a sentinel names a master")
    }

    pub fn server(&self, port: u16) -> &Server {
        self.servers
            .iter()
            .find(|s| s.port == port)
            .expect("a server of the group")
    }

    /// `SENTINEL FAILOVER`: a failover without agreement, the master still running.
    pub fn failover(&self) {
        let mut c = self.sentinels[0].conn().expect("a sentinel connection");
        let _: () = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(SERVICE)
            .query(&mut c)
            .unwrap();
    }

    /// Waits until every sentinel names a master other than `old`, and it says it is one.
    pub fn wait_new_master(&self, old: u16, limit: Duration) -> u16 {
        let start = Instant::now();
        loop {
            let named: Vec<Option<u16>> =
                self.sentinels.iter().map(Sentinel::master_port).collect();
            if let Some(Some(p)) = named.first() {
                if *p != old && named.iter().all(|n| *n == Some(*p)) && self.is_master(*p) {
                    return *p;
                }
            }
            assert!(
                start.elapsed() < limit,
                "no failover in {limit:?}: sentinels name {named:?}; log of the first:\n{}",
                self.sentinels[0].log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn is_master(&self, port: u16) -> bool {
        let Some(s) = self.servers.iter().find(|s| s.port == port) else {
            return false;
        };
        let Ok(mut c) = s
            .client()
            .get_connection_with_timeout(Duration::from_millis(500))
        else {
            return false;
        };
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query(&mut c)
            .unwrap_or_default();
        info.contains("role:master")
    }
}
