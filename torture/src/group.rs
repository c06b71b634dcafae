//! A Sentinel group on loopback: one master and two replicas (all with the module) watched by
//! three sentinels (`redis-server --sentinel`, quorum 2). Every process is ours and is stopped
//! by its pid when the group is dropped. All calls block; the fault injector runs them on a
//! thread of its own.

use std::path::Path;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::Value;
use redis_lease_testkit::sentinel::{fine, sentinel_url, Sentinel};
use redis_lease_testkit::{Options, Server};

pub use redis_lease_testkit::sentinel::{quick, SentinelTiming};

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
        sentinel_url(&self.sentinels)
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
