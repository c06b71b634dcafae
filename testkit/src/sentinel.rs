//! Sentinels on loopback (`redis-server --sentinel`, no module), each with its own directory
//! and a timing short enough for tests. The client's Sentinel tests and the torture test build
//! their groups on this. Every process is stopped by its pid when dropped.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::server::{free_port, server_binary};

/// The name the sentinels monitor.
pub const SERVICE: &str = "lease";

/// Sentinel timing.
#[derive(Clone, Copy, Debug)]
pub struct SentinelTiming {
    pub down_after: Duration,
    /// Also the least time between two failovers of one master: a sentinel starts no failover
    /// within twice this of the last one it started or voted for.
    pub failover_timeout: Duration,
    /// How often a sentinel pings each instance (`SENTINEL DEBUG ping-period`; Sentinel's
    /// default is 1 s). It must stay below down-after: a sentinel sends the first ping to a
    /// newly promoted master one period after the switch, and counts it down once down-after
    /// has passed since the switch with no reply, so with the two equal it may flag the new
    /// master down and fail over again at once.
    pub ping_period: Duration,
    /// How many replicas resync with a new master at once.
    pub parallel_syncs: u32,
}

/// One short-lived connection with 1 s timeouts (a frozen server must not hang the caller).
pub fn quick(port: u16) -> Option<redis::Connection> {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let conn = c
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    conn.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    Some(conn)
}

/// The `redis+sentinel://` URL of [`SERVICE`] through `sentinels`.
pub fn sentinel_url(sentinels: &[Sentinel]) -> String {
    let hosts: Vec<String> = sentinels
        .iter()
        .map(|s| format!("127.0.0.1:{}", s.port))
        .collect();
    format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
}

/// One sentinel, monitoring [`SERVICE`] with quorum 2.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Sentinel {
    /// Starts a sentinel watching the master on `master_port` (five tries, each on a fresh
    /// port); panics with the last log if none came up.
    pub fn start(master_port: u16, timing: SentinelTiming) -> Sentinel {
        let mut last = String::new();
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("redis-lease-sentinel-")
                .tempdir()
                .expect("tempdir");
            let port = free_port();
            // Sentinel rewrites its configuration file: each has its own.
            let conf = dir.path().join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile sentinel.log\n\
                     sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {SERVICE} {down}\n\
                     sentinel failover-timeout {SERVICE} {failover}\n\
                     sentinel parallel-syncs {SERVICE} {syncs}\n",
                    dir = dir.path().display(),
                    down = timing.down_after.as_millis(),
                    failover = timing.failover_timeout.as_millis(),
                    syncs = timing.parallel_syncs,
                ),
            )
            .expect("write sentinel.conf");
            let child = Command::new(server_binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server --sentinel");
            let mut s = Sentinel { port, child, dir };
            if s.wait_ready() && s.debug("ping-period", timing.ping_period) {
                return s;
            }
            last = s.log();
        }
        panic!("sentinel did not start: {last}");
    }

    fn wait_ready(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(20) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Some(mut c) = self.conn() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// `SENTINEL DEBUG <param> <ms>`: one of Sentinel's internal periods (Redis 7.0+).
    fn debug(&self, param: &str, value: Duration) -> bool {
        self.conn().is_some_and(|mut c| {
            redis::cmd("SENTINEL")
                .arg("DEBUG")
                .arg(param)
                .arg(value.as_millis() as u64)
                .query::<String>(&mut c)
                .is_ok()
        })
    }

    /// A connection to this sentinel ([`quick`]).
    pub fn conn(&self) -> Option<redis::Connection> {
        quick(self.port)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The port of the master this sentinel names.
    pub fn master_port(&self) -> Option<u16> {
        let mut c = self.conn()?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(SERVICE)
            .query(&mut c)
            .ok()?;
        addr.map(|(_, p)| p)
    }

    /// The flags of the replicas (by port) and of the other sentinels it knows.
    pub fn known(&self) -> Option<(HashMap<u16, String>, Vec<String>)> {
        let mut c = self.conn()?;
        let mut list = |sub: &str| -> Option<Vec<HashMap<String, String>>> {
            redis::cmd("SENTINEL")
                .arg(sub)
                .arg(SERVICE)
                .query(&mut c)
                .ok()
        };
        let replicas = list("replicas")?
            .into_iter()
            .filter_map(|r| Some((r.get("port")?.parse().ok()?, r.get("flags")?.clone())))
            .collect();
        let sentinels = list("sentinels")?
            .into_iter()
            .filter_map(|s| s.get("flags").cloned())
            .collect();
        Some((replicas, sentinels))
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether an instance's Sentinel flags say it is fine (`master_down` on a sentinel is only
/// its last answer about the master).
pub fn fine(flags: &str) -> bool {
    !flags
        .split(',')
        .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
}
