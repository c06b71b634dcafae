//! A real Redis Cluster on loopback: 3 masters and 3 replicas, the module on every node, built
//! with `redis-cli --cluster create`. Nodes are stopped (by pid) when the cluster is dropped.

use std::process::Command;
use std::time::Duration;

use crate::info::info_field;
use crate::poll::until;
use crate::server::{Options, Server};

/// One line of `CLUSTER NODES`.
#[derive(Clone, Debug)]
pub struct NodeLine {
    pub id: String,
    pub port: u16,
    pub master: bool,
    pub master_id: String,
    pub slots: Vec<(u16, u16)>,
}

/// Parses `CLUSTER NODES` as seen from `conn`.
pub fn cluster_nodes(conn: &mut redis::Connection) -> Vec<NodeLine> {
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(conn).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let addr = f[1].split('@').next().unwrap();
            let port = addr.rsplit(':').next().unwrap().parse().unwrap();
            let slots = f[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .map(|s| match s.split_once('-') {
                    Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                    None => (s.parse().unwrap(), s.parse().unwrap()),
                })
                .collect();
            NodeLine {
                id: f[0].to_string(),
                port,
                master: f[2].contains("master"),
                master_id: f[3].to_string(),
                slots,
            }
        })
        .collect()
}

pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Starts 6 nodes and joins them as 3 masters with one replica each.
    pub fn start() -> Cluster {
        Cluster::start_with(Options::default())
    }

    /// As [`Cluster::start`], every node with `opts` besides the cluster settings.
    pub fn start_with(opts: Options) -> Cluster {
        Cluster::start_each(vec![opts; 6])
    }

    /// As [`Cluster::start`], node `i` with `opts[i]` besides the cluster settings (6 nodes;
    /// `redis-cli --cluster create` makes the first three masters).
    pub fn start_each(opts: Vec<Options>) -> Cluster {
        let cluster = |o: Options| {
            o.arg("cluster-enabled", "yes")
                .arg("cluster-config-file", "nodes.conf")
                .arg("cluster-node-timeout", "3000")
                .arg("appendonly", "no")
        };
        let nodes: Vec<Server> = opts.into_iter().map(|o| Server::with(cluster(o))).collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .expect("redis-cli");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        let c = Cluster { nodes };
        for n in &c.nodes {
            let mut conn = n.conn();
            until(Duration::from_secs(30), "cluster_state:ok", || {
                let text: String = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut conn)
                    .unwrap_or_default();
                text.contains("cluster_state:ok")
            });
            // Roles spread by gossip: wait until this node sees 3 masters and 3 replicas.
            until(
                Duration::from_secs(30),
                "every node to agree on roles",
                || {
                    let nodes = cluster_nodes(&mut conn);
                    let masters = nodes
                        .iter()
                        .filter(|n| n.master && !n.slots.is_empty())
                        .count();
                    masters == 3 && nodes.iter().filter(|n| !n.master).count() == 3
                },
            );
        }
        c
    }

    /// `redis://` addresses of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.url()).collect()
    }

    pub fn node(&self, port: u16) -> &Server {
        self.nodes.iter().find(|n| n.port == port).unwrap()
    }

    /// The master serving `key`'s slot.
    pub fn owner_of(&self, key: &str) -> NodeLine {
        let mut conn = self.nodes[0].conn();
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .unwrap();
        cluster_nodes(&mut conn)
            .into_iter()
            .find(|n| n.master && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .unwrap()
    }

    /// Fails over the master serving `key` to its replica (after the replica acknowledged
    /// every write), and waits until the whole cluster agrees. Answers the new master.
    pub fn fail_over(&self, key: &str) -> NodeLine {
        let master = self.owner_of(key);
        let mut mconn = self.node(master.port).conn();
        let replica = cluster_nodes(&mut mconn)
            .into_iter()
            .find(|n| !n.master && n.master_id == master.id)
            .unwrap();
        // A replica may be between links (a resync): give it time, and say why if it never
        // acknowledges.
        let start = std::time::Instant::now();
        loop {
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(1000)
                .query(&mut mconn)
                .unwrap();
            if acked == 1 {
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "the replica never acknowledged the master's writes; master:\n{:?}\nreplica log:\n{}",
                info_field(&mut mconn, "replication", "connected_slaves"),
                self.node(replica.port).log()
            );
        }
        let mut rconn = self.node(replica.port).conn();
        let _: () = redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query(&mut rconn)
            .unwrap();
        until(Duration::from_secs(30), "the replica to take over", || {
            info_field(&mut rconn, "replication", "role").as_deref() == Some("master")
        });
        until(Duration::from_secs(30), "the cluster to agree", || {
            self.owner_of(key).id == replica.id
        });
        replica
    }

    /// The hash slot of `key`.
    pub fn slot_of(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn())
            .unwrap()
    }

    /// Every master as this cluster sees it.
    pub fn masters(&self) -> Vec<NodeLine> {
        cluster_nodes(&mut self.nodes[0].conn())
            .into_iter()
            .filter(|n| n.master && !n.slots.is_empty())
            .collect()
    }

    /// A master other than `than` (a slot's target when it moves away from `than`).
    pub fn other_master(&self, than: &NodeLine) -> NodeLine {
        self.masters()
            .into_iter()
            .find(|n| n.id != than.id)
            .expect("another master")
    }

    /// Starts moving `slot` from `src` to `dst` as `redis-cli --cluster reshard` does: IMPORTING
    /// on the target first, then MIGRATING on the source.
    pub fn begin_migration(&self, slot: u16, src: &NodeLine, dst: &NodeLine) {
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("IMPORTING")
            .arg(&src.id)
            .query(&mut self.node(dst.port).conn())
            .unwrap();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("MIGRATING")
            .arg(&dst.id)
            .query(&mut self.node(src.port).conn())
            .unwrap();
    }

    /// Moves `keys` from `src` to `dst` with MIGRATE (the slot migrating); the error if Redis
    /// refuses (BUSYKEY when the target already has one).
    pub fn migrate_keys(
        &self,
        src: &NodeLine,
        dst: &NodeLine,
        keys: &[&str],
    ) -> redis::RedisResult<()> {
        redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(dst.port)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(keys)
            .query(&mut self.node(src.port).conn())
    }

    /// Ends the move of `slot`: SETSLOT NODE `dst` on the target, then on every other master,
    /// and waits until every master sees `dst` own it.
    pub fn finish_migration(&self, slot: u16, dst: &NodeLine) {
        let masters = self.masters();
        let order = masters
            .iter()
            .filter(|n| n.id == dst.id)
            .chain(masters.iter().filter(|n| n.id != dst.id));
        for n in order {
            let _: () = redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(&dst.id)
                .query(&mut self.node(n.port).conn())
                .unwrap();
        }
        until(
            Duration::from_secs(30),
            "every master to see the slot moved",
            || {
                self.masters().iter().all(|m| {
                    let mut conn = self.node(m.port).conn();
                    cluster_nodes(&mut conn).iter().any(|n| {
                        n.id == dst.id && n.slots.iter().any(|(a, b)| (*a..=*b).contains(&slot))
                    })
                })
            },
        );
    }
}

/// The hash slot of `key` (CRC16/XMODEM of the key or its hash tag, modulo 16384), as
/// `CLUSTER KEYSLOT` answers, without asking a server.
pub fn key_slot(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    let crc = tagged.unwrap_or(key).iter().fold(0u16, |mut crc, b| {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
        crc
    });
    crc & 16383
}

#[cfg(test)]
mod tests {
    #[test]
    fn key_slots_match_redis() {
        assert_eq!(super::key_slot(b"foo"), 12182);
        assert_eq!(super::key_slot(b"{user1000}.following"), 3443);
        assert_eq!(super::key_slot(b"foo{}{bar}"), 8363);
    }
}
