//! Redis Cluster: 3 masters and 3 replicas on loopback, the module on every node. Locks and
//! elections on keys over every master, waiting, a held lock moved to another node with its
//! slot (MIGRATE), and a master failed over to its replica, through a cluster-aware client.

use std::collections::HashSet;
use std::process::Command;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterConnection};
use redis::{Connection, Value};
use redis_lease_testkit::{Options, Server};

struct Cluster {
    nodes: Vec<Server>,
}

fn until(limit: Duration, what: &str, mut ok: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ok() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        sleep(Duration::from_millis(100));
    }
}

fn info_field(conn: &mut Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(conn).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or("")
        .trim()
        .to_string()
}

/// One line of CLUSTER NODES: (id, port, is_master, master_id, slots).
struct NodeLine {
    id: String,
    port: u16,
    master: bool,
    master_id: String,
    slots: Vec<(u16, u16)>,
}

fn cluster_nodes(conn: &mut Connection) -> Vec<NodeLine> {
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(conn).unwrap();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let port = f[1]
                .split('@')
                .next()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
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

impl Cluster {
    fn start() -> Cluster {
        let opts = Options::default()
            .arg("cluster-enabled", "yes")
            .arg("cluster-config-file", "nodes.conf")
            .arg("cluster-node-timeout", "3000")
            .arg("appendonly", "no");
        let nodes: Vec<Server> = (0..6).map(|_| Server::with(opts.clone())).collect();
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
                info_cluster_ok(&mut conn)
            });
        }
        c
    }

    fn client(&self) -> ClusterConnection {
        let urls: Vec<String> = self.nodes.iter().map(|n| n.url()).collect();
        ClusterClient::builder(urls)
            .response_timeout(Duration::from_secs(10))
            .retries(8)
            .build()
            .unwrap()
            .get_connection()
            .unwrap()
    }

    fn node(&self, port: u16) -> &Server {
        self.nodes.iter().find(|n| n.port == port).unwrap()
    }

    fn owner_of(&self, key: &str) -> NodeLine {
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
}

fn info_cluster_ok(conn: &mut Connection) -> bool {
    let text: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query(conn)
        .unwrap_or_default();
    text.contains("cluster_state:ok")
}

fn token(v: Value) -> Option<i64> {
    match v {
        Value::Int(t) => Some(t),
        Value::Nil => None,
        other => panic!("unexpected reply {other:?}"),
    }
}

fn holders(conn: &mut ClusterConnection, key: &str) -> Vec<(String, i64)> {
    let v: Value = redis::cmd("RWLOCK.INFO").arg(key).query(conn).unwrap();
    let Value::Array(fields) = v else {
        panic!("{v:?}")
    };
    let mut out = vec![];
    for pair in fields.chunks(2) {
        if pair[0] == Value::BulkString(b"holders".to_vec()) {
            let Value::Array(hs) = &pair[1] else { panic!() };
            for h in hs {
                let Value::Array(hf) = h else { panic!() };
                let mut owner = String::new();
                let mut tok = 0;
                for kv in hf.chunks(2) {
                    match (&kv[0], &kv[1]) {
                        (Value::BulkString(k), Value::BulkString(o)) if k == b"owner" => {
                            owner = String::from_utf8(o.clone()).unwrap()
                        }
                        (Value::BulkString(k), Value::Int(t)) if k == b"token" => tok = *t,
                        _ => {}
                    }
                }
                out.push((owner, tok));
            }
        }
    }
    out
}

#[test]
fn locks_and_elections_work_across_a_cluster_through_slot_moves_and_failover() {
    let cluster = Cluster::start();
    let mut c = cluster.client();

    // Keys over every master.
    let mut masters = HashSet::new();
    for i in 0..300 {
        let key = format!("lock:{i}");
        let t = token(
            redis::cmd("RWLOCK.WLOCK")
                .arg(&key)
                .arg("me")
                .arg(60_000)
                .query(&mut c)
                .unwrap(),
        );
        assert!(t.is_some(), "{key}");
        let again: Value = redis::cmd("RWLOCK.WLOCK")
            .arg(&key)
            .arg("you")
            .arg(60_000)
            .query(&mut c)
            .unwrap();
        assert_eq!(again, Value::Nil);
        let term = token(
            redis::cmd("LEADER.CAMPAIGN")
                .arg(format!("election:{i}"))
                .arg("node-a")
                .arg(60_000)
                .query(&mut c)
                .unwrap(),
        );
        assert!(term.is_some());
        if i % 10 == 0 {
            masters.insert(cluster.owner_of(&key).port);
        }
    }
    assert_eq!(masters.len(), 3, "keys landed on every master");
    let cur: Value = redis::cmd("LEADER.CURRENT")
        .arg("election:7")
        .query(&mut c)
        .unwrap();
    assert!(matches!(cur, Value::Array(ref v) if v[0] == Value::BulkString(b"node-a".to_vec())));

    // Waiting: a writer parked in the owning node is handed the lock at release.
    let t1 = token(
        redis::cmd("RWLOCK.WLOCK")
            .arg("wait-key")
            .arg("holder")
            .arg(60_000)
            .query(&mut c)
            .unwrap(),
    )
    .unwrap();
    let waiter = {
        let mut c2 = cluster.client();
        std::thread::spawn(move || {
            let start = Instant::now();
            let t: Value = redis::cmd("RWLOCK.WLOCK")
                .arg("wait-key")
                .arg("waiter")
                .arg(60_000)
                .arg("WAIT")
                .arg(8_000)
                .query(&mut c2)
                .unwrap();
            (token(t), start.elapsed())
        })
    };
    sleep(Duration::from_millis(300));
    let released: i64 = redis::cmd("RWLOCK.UNLOCK")
        .arg("wait-key")
        .arg("holder")
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 1);
    let (t2, waited) = waiter.join().unwrap();
    assert!(t2.unwrap() > t1, "the waiter got a larger token");
    assert!(
        waited < Duration::from_secs(5),
        "handed off at release, not at timeout: {waited:?}"
    );

    // Move the slot of a held lock to another master: holder and token survive.
    let key = "migrate-me";
    let t = token(
        redis::cmd("RWLOCK.WLOCK")
            .arg(key)
            .arg("mover")
            .arg(60_000)
            .query(&mut c)
            .unwrap(),
    )
    .unwrap();
    let src = cluster.owner_of(key);
    let mut admin = cluster.nodes[0].conn();
    let all = cluster_nodes(&mut admin);
    let dst = all.iter().find(|n| n.master && n.id != src.id).unwrap();
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query(&mut admin)
        .unwrap();
    let mut src_conn = cluster.node(src.port).conn();
    let mut dst_conn = cluster.node(dst.port).conn();
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("IMPORTING")
        .arg(&src.id)
        .query(&mut dst_conn)
        .unwrap();
    let _: () = redis::cmd("CLUSTER")
        .arg("SETSLOT")
        .arg(slot)
        .arg("MIGRATING")
        .arg(&dst.id)
        .query(&mut src_conn)
        .unwrap();
    let keys: Vec<String> = redis::cmd("CLUSTER")
        .arg("GETKEYSINSLOT")
        .arg(slot)
        .arg(100)
        .query(&mut src_conn)
        .unwrap();
    assert!(keys.contains(&key.to_string()));
    let _: () = redis::cmd("MIGRATE")
        .arg("127.0.0.1")
        .arg(dst.port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(&keys)
        .query(&mut src_conn)
        .unwrap();
    for n in all.iter().filter(|n| n.master) {
        let mut conn = cluster.node(n.port).conn();
        let _: () = redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(&dst.id)
            .query(&mut conn)
            .unwrap();
    }
    assert_eq!(cluster.owner_of(key).id, dst.id);
    assert_eq!(holders(&mut c, key), vec![("mover".to_string(), t)]);
    let busy: Value = redis::cmd("RWLOCK.WLOCK")
        .arg(key)
        .arg("other")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(busy, Value::Nil, "still held after the move");
    let renewed = token(
        redis::cmd("RWLOCK.RENEW")
            .arg(key)
            .arg("mover")
            .arg(60_000)
            .query(&mut c)
            .unwrap(),
    );
    assert_eq!(renewed, Some(t));
    let _: i64 = redis::cmd("RWLOCK.UNLOCK")
        .arg(key)
        .arg("mover")
        .query(&mut c)
        .unwrap();
    let t_after = token(
        redis::cmd("RWLOCK.WLOCK")
            .arg(key)
            .arg("other")
            .arg(1000)
            .query(&mut c)
            .unwrap(),
    )
    .unwrap();
    assert!(t_after > t);

    // Fail a master over to its replica: the holder, its token and the client carry on.
    let key = "failover-me";
    let t = token(
        redis::cmd("RWLOCK.WLOCK")
            .arg(key)
            .arg("survivor")
            .arg(60_000)
            .query(&mut c)
            .unwrap(),
    )
    .unwrap();
    let master = cluster.owner_of(key);
    let mut mconn = cluster.node(master.port).conn();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut mconn)
        .unwrap();
    assert_eq!(acked, 1, "the replica has the grant");
    let replica = cluster_nodes(&mut mconn)
        .into_iter()
        .find(|n| !n.master && n.master_id == master.id)
        .unwrap();
    let mut rconn = cluster.node(replica.port).conn();
    let _: () = redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query(&mut rconn)
        .unwrap();
    until(Duration::from_secs(30), "the replica to take over", || {
        info_field(&mut rconn, "replication", "role") == "master"
    });
    until(Duration::from_secs(30), "the cluster to agree", || {
        cluster.owner_of(key).id == replica.id
    });
    assert_eq!(holders(&mut c, key), vec![("survivor".to_string(), t)]);
    let busy: Value = redis::cmd("RWLOCK.WLOCK")
        .arg(key)
        .arg("intruder")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(busy, Value::Nil);
    assert_eq!(
        token(
            redis::cmd("RWLOCK.RENEW")
                .arg(key)
                .arg("survivor")
                .arg(60_000)
                .query(&mut c)
                .unwrap()
        ),
        Some(t)
    );
    let _: i64 = redis::cmd("RWLOCK.UNLOCK")
        .arg(key)
        .arg("survivor")
        .query(&mut c)
        .unwrap();
    let next = token(
        redis::cmd("RWLOCK.WLOCK")
            .arg(key)
            .arg("intruder")
            .arg(1000)
            .query(&mut c)
            .unwrap(),
    )
    .unwrap();
    assert!(next > t, "the promoted node hands out larger tokens");
    // Every other lock is still there.
    let others = holders(&mut c, "lock:42");
    assert_eq!(others.len(), 1);
    assert_eq!(others[0].0, "me");
}
