//! A Sentinel group on loopback for failover tests: one master and its replicas (all with the
//! module) watched by three sentinels (`redis-server --sentinel`, no module) with a short
//! `down-after-milliseconds`. Every process is stopped by its pid when the group is dropped.
//! (A candidate for the shared test kit.)

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use redis_lease_testkit::{free_port, server_binary, Options, Server};

use super::replica::wait_replicas;

/// The name the sentinels monitor.
pub const SERVICE: &str = "lease";

/// How often each sentinel pings each instance (`SENTINEL DEBUG ping-period`; the default is
/// 1 s). It must stay below down-after: a sentinel first pings a newly promoted master one
/// period after the switch and counts it down once down-after has passed since the switch with
/// no reply, so with the two equal it may fail the new master over again at once.
const PING_PERIOD: Duration = Duration::from_millis(500);

pub struct Sentinel {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Sentinel {
    fn start(master_port: u16) -> Sentinel {
        let dir =
            std::env::temp_dir().join(format!("redis-lease-sentinel-{}", uuid::Uuid::new_v4()));
        let mut last = String::new();
        for _ in 0..5 {
            std::fs::create_dir_all(&dir).unwrap();
            let port = free_port();
            // Sentinel rewrites its configuration file, so each has its own.
            let conf = dir.join("sentinel.conf");
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile sentinel.log\n\
                     sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {SERVICE} 1000\n\
                     sentinel failover-timeout {SERVICE} 6000\n\
                     sentinel parallel-syncs {SERVICE} 2\n",
                    dir = dir.display()
                ),
            )
            .unwrap();
            let child = Command::new(server_binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn redis-server --sentinel");
            let mut s = Sentinel {
                port,
                child,
                dir: dir.clone(),
            };
            if s.wait_ready() && s.ping_every(PING_PERIOD) {
                return s;
            }
            last = s.log();
        }
        panic!("sentinel did not start: {last}");
    }

    fn wait_ready(&mut self) -> bool {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false;
            }
            if let Ok(mut c) = self.conn() {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    fn ping_every(&self, period: Duration) -> bool {
        self.conn().is_ok_and(|mut c| {
            redis::cmd("SENTINEL")
                .arg("DEBUG")
                .arg("ping-period")
                .arg(period.as_millis() as u64)
                .query::<String>(&mut c)
                .is_ok()
        })
    }

    pub fn conn(&self) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))?
            .get_connection_with_timeout(Duration::from_millis(500))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default()
    }

    /// The port of the master this sentinel names.
    pub fn master_port(&self) -> Option<u16> {
        let mut c = self.conn().ok()?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(SERVICE)
            .query(&mut c)
            .ok()?;
        addr.map(|(_, p)| p)
    }

    /// How many (replicas, other sentinels) it knows, not counting those it thinks down.
    fn known(&self) -> Option<(usize, usize)> {
        let mut c = self.conn().ok()?;
        let count = |sub: &str, c: &mut redis::Connection| -> Option<usize> {
            let items: Vec<std::collections::HashMap<String, String>> =
                redis::cmd("SENTINEL").arg(sub).arg(SERVICE).query(c).ok()?;
            Some(
                items
                    .iter()
                    .filter(|i| i.get("flags").is_some_and(|f| !f.contains("down")))
                    .count(),
            )
        };
        Some((count("replicas", &mut c)?, count("sentinels", &mut c)?))
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
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
        let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(servers[0].port)).collect();
        let g = Group { servers, sentinels };
        // Sentinels find the replicas through the master's INFO and each other through hello
        // messages (every 2 s): a failover needs both.
        let start = Instant::now();
        while !g.sentinels.iter().all(|s| s.known() == Some((replicas, 2))) {
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "sentinels did not find each other: {:?}",
                g.sentinels.iter().map(Sentinel::known).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        g
    }

    /// The `redis+sentinel://` URL of the group.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/{SERVICE}", hosts.join(","))
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
        let mut c = self.sentinels[0].conn().unwrap();
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
