//! A Sentinel group on loopback: one master and two replicas (all with the module) watched by
//! three sentinels (`redis-server --sentinel`, quorum 2). Every process is ours and is stopped
//! by its pid when the group is dropped. All calls block; the fault injector runs them on a
//! thread of its own.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lease_testkit::{free_port, server_binary, Options, Server};

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
}

/// One short-lived connection with timeouts (a frozen server must not hang the injector).
pub fn quick(port: u16) -> Option<redis::Connection> {
    let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let conn = c
        .get_connection_with_timeout(Duration::from_millis(500))
        .ok()?;
    conn.set_read_timeout(Some(Duration::from_secs(1))).ok()?;
    conn.set_write_timeout(Some(Duration::from_secs(1))).ok()?;
    Some(conn)
}

/// What `ROLE` says of a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Master { replicas: Vec<u16> },
    Replica { master: u16, connected: bool },
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// `ROLE` of the server on `port`, if it answers.
pub fn role(port: u16) -> Option<Role> {
    let mut c = quick(port)?;
    let v: Value = redis::cmd("ROLE").query(&mut c).ok()?;
    let Value::Array(items) = v else { return None };
    match text(items.first()?)?.as_str() {
        "master" => {
            let replicas = match items.get(2) {
                Some(Value::Array(rs)) => rs
                    .iter()
                    .filter_map(|r| match r {
                        Value::Array(f) => f.get(1).and_then(text)?.parse().ok(),
                        _ => None,
                    })
                    .collect(),
                _ => vec![],
            };
            Some(Role::Master { replicas })
        }
        "slave" => Some(Role::Replica {
            master: text(items.get(2)?)?.parse().ok()?,
            connected: text(items.get(3)?)? == "connected",
        }),
        _ => None,
    }
}

/// An `INFO` field of the server on `port`.
pub fn info_field(port: u16, section: &str, field: &str) -> Option<String> {
    let mut c = quick(port)?;
    let info: String = redis::cmd("INFO").arg(section).query(&mut c).ok()?;
    info.lines().find_map(|l| {
        l.strip_prefix(field)
            .and_then(|r| r.strip_prefix(':'))
            .map(|v| v.trim().to_string())
    })
}

pub struct Sentinel {
    pub port: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Sentinel {
    fn start(master_port: u16, timing: SentinelTiming) -> Sentinel {
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
                     sentinel parallel-syncs {SERVICE} 1\n",
                    dir = dir.path().display(),
                    down = timing.down_after.as_millis(),
                    failover = timing.failover_timeout.as_millis(),
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
            if let Some(mut c) = quick(self.port) {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return true;
                }
            }
            sleep(Duration::from_millis(20));
        }
        false
    }

    /// `SENTINEL DEBUG <param> <ms>`: one of Sentinel's internal periods (Redis 7.0+).
    fn debug(&self, param: &str, value: Duration) -> bool {
        quick(self.port).is_some_and(|mut c| {
            redis::cmd("SENTINEL")
                .arg("DEBUG")
                .arg(param)
                .arg(value.as_millis() as u64)
                .query::<String>(&mut c)
                .is_ok()
        })
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("sentinel.log")
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The port of the master this sentinel names.
    pub fn master_port(&self) -> Option<u16> {
        let mut c = quick(self.port)?;
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(SERVICE)
            .query(&mut c)
            .ok()?;
        addr.map(|(_, p)| p)
    }

    /// The flags of the replicas (by port) and of the other sentinels it knows.
    fn known(&self) -> Option<(HashMap<u16, String>, Vec<String>)> {
        let mut c = quick(self.port)?;
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
fn fine(flags: &str) -> bool {
    !flags
        .split(',')
        .any(|f| matches!(f, "s_down" | "o_down" | "disconnected"))
}

pub struct Group {
    /// The options every server starts with (a replica gets `--replicaof` on top).
    pub base: Options,
    pub servers: Vec<Server>,
    pub sentinels: Vec<Sentinel>,
}

impl Group {
    /// A master, two replicas and three sentinels that know them all.
    pub fn start(base: Options, timing: SentinelTiming) -> Group {
        let master = Server::with(base.clone());
        let mut servers = vec![master];
        for _ in 0..2 {
            let opts = base
                .clone()
                .arg("replicaof", &format!("127.0.0.1 {}", servers[0].port));
            servers.push(Server::with(opts));
        }
        let sentinels = (0..3)
            .map(|_| Sentinel::start(servers[0].port, timing))
            .collect();
        let g = Group {
            base,
            servers,
            sentinels,
        };
        let master = g.servers[0].port;
        // Sentinels find the replicas through the master's INFO and each other through hello
        // messages (every 2 s): a failover needs both.
        let start = Instant::now();
        while !g.healthy(master) {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the group did not come up: {}",
                g.describe()
            );
            sleep(Duration::from_millis(100));
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

    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(|s| s.port).collect()
    }

    pub fn server_mut(&mut self, port: u16) -> &mut Server {
        self.servers
            .iter_mut()
            .find(|s| s.port == port)
            .expect("a server of the group")
    }

    pub fn pid(&self, port: u16) -> Option<u32> {
        self.servers.iter().find(|s| s.port == port)?.pid()
    }

    /// The master every sentinel names, if they agree.
    pub fn agreed_master(&self) -> Option<u16> {
        let named: Vec<Option<u16>> = self.sentinels.iter().map(Sentinel::master_port).collect();
        let first = (*named.first()?)?;
        named.iter().all(|n| *n == Some(first)).then_some(first)
    }

    /// `master` leads: it says so, the other two replicate from it (linked), and every
    /// sentinel names it and sees both replicas and both other sentinels as fine.
    pub fn healthy(&self, master: u16) -> bool {
        let others: Vec<u16> = self.ports().into_iter().filter(|p| *p != master).collect();
        match role(master) {
            Some(Role::Master { replicas }) if others.iter().all(|o| replicas.contains(o)) => {}
            _ => return false,
        }
        let linked = others.iter().all(|o| {
            role(*o)
                == Some(Role::Replica {
                    master,
                    connected: true,
                })
        });
        linked
            && self.sentinels.iter().all(|s| {
                s.master_port() == Some(master)
                    && s.known().is_some_and(|(replicas, sentinels)| {
                        others
                            .iter()
                            .all(|o| replicas.get(o).is_some_and(|f| fine(f)))
                            && sentinels.len() == 2
                            && sentinels.iter().all(|f| fine(f))
                    })
            })
    }

    /// Restarts the server on `port` (same port and directory, empty: no persistence) as a
    /// replica of `master`.
    pub fn restart_as_replica(&mut self, port: u16, master: u16) {
        let opts = self
            .base
            .clone()
            .arg("replicaof", &format!("127.0.0.1 {master}"));
        self.server_mut(port).restart(Some(opts));
    }

    /// Restarts the server on `port` as a master (when no failover replaced it).
    pub fn restart_as_master(&mut self, port: u16) {
        let opts = self.base.clone();
        self.server_mut(port).restart(Some(opts));
    }

    /// `REPLICAOF 127.0.0.1 <master>` on `port`.
    pub fn replicaof(&self, port: u16, master: u16) -> bool {
        quick(port).is_some_and(|mut c| {
            redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(master)
                .query::<String>(&mut c)
                .is_ok()
        })
    }

    /// The local address (`127.0.0.1:<port>`) of the replica's connection to its master, as
    /// the master sees it (`CLIENT LIST TYPE master` on the replica).
    pub fn link_addr(&self, replica: u16) -> Option<String> {
        let mut c = quick(replica)?;
        let list: String = redis::cmd("CLIENT")
            .arg("LIST")
            .arg("TYPE")
            .arg("master")
            .query(&mut c)
            .ok()?;
        list.split_whitespace()
            .find_map(|f| f.strip_prefix("laddr=").map(str::to_string))
    }

    /// Closes the master's replication connections: to the replica at `addr` (see
    /// [`Group::link_addr`]), or to all of them. What the master writes from then on reaches
    /// that replica only if it reconnects (which a stopped replica cannot).
    pub fn cut_links(&self, master: u16, addr: Option<&str>) -> bool {
        quick(master).is_some_and(|mut c| {
            let mut cmd = redis::cmd("CLIENT");
            cmd.arg("KILL");
            match addr {
                Some(a) => cmd.arg("ADDR").arg(a),
                None => cmd.arg("TYPE").arg("replica"),
            };
            cmd.query::<redis::Value>(&mut c).is_ok()
        })
    }

    /// Roles and sentinels' views, for failure messages.
    pub fn describe(&self) -> String {
        let roles: Vec<String> = self
            .ports()
            .iter()
            .map(|p| format!("{p}: {:?}", role(*p)))
            .collect();
        let views: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("{}: {:?} {:?}", s.port, s.master_port(), s.known()))
            .collect();
        format!(
            "roles [{}]; sentinels [{}]",
            roles.join(", "),
            views.join(", ")
        )
    }

    /// Copies every server's and sentinel's log into `dir`.
    pub fn save_logs(&self, dir: &Path) {
        let _ = std::fs::create_dir_all(dir);
        for s in &self.servers {
            let _ = std::fs::write(dir.join(format!("redis-{}.log", s.port)), s.log());
        }
        for s in &self.sentinels {
            let _ = std::fs::write(dir.join(format!("sentinel-{}.log", s.port)), s.log());
        }
    }

    /// How often a sentinel's log shows an event (e.g. `+tilt`, `+switch-master`): the most
    /// any of the three logged.
    pub fn sentinel_events(&self, event: &str) -> usize {
        let needle = format!(" {event} ");
        self.sentinels
            .iter()
            .map(|s| s.log().lines().filter(|l| l.contains(&needle)).count())
            .max()
            .unwrap_or(0)
    }
}
