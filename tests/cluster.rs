//! Redis Cluster: 3 masters and 3 replicas on loopback, the module on every node. Locks and
//! elections on keys over every master, waiting, a held lock moved to another node with its
//! slot (MIGRATE), and a master failed over to its replica, through a cluster-aware client.

use std::collections::HashSet;
use std::thread::sleep;
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterConnection};
use redis::Value;
use redis_lease_testkit::cluster::{cluster_nodes, Cluster};
use redis_lease_testkit::reply::token_or_nil;
use redis_lease_testkit::state::parse_lock_info;

fn client(cluster: &Cluster) -> ClusterConnection {
    ClusterClient::builder(cluster.urls())
        .response_timeout(Duration::from_secs(10))
        .retries(8)
        .build()
        .unwrap()
        .get_connection()
        .unwrap()
}

fn holders(conn: &mut ClusterConnection, key: &str) -> Vec<(String, i64)> {
    let v: Value = redis::cmd("RWLOCK.INFO").arg(key).query(conn).unwrap();
    parse_lock_info(&v)
        .holders
        .into_iter()
        .map(|h| (h.owner, h.token))
        .collect()
}

#[test]
fn locks_and_elections_work_across_a_cluster_through_slot_moves_and_failover() {
    let cluster = Cluster::start();
    let mut c = client(&cluster);

    // Keys over every master.
    let mut masters = HashSet::new();
    for i in 0..300 {
        let key = format!("lock:{i}");
        let t = token_or_nil(
            &redis::cmd("RWLOCK.WLOCK")
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
        let term = token_or_nil(
            &redis::cmd("LEADER.CAMPAIGN")
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
    let t1 = token_or_nil(
        &redis::cmd("RWLOCK.WLOCK")
            .arg("wait-key")
            .arg("holder")
            .arg(60_000)
            .query(&mut c)
            .unwrap(),
    )
    .unwrap();
    let waiter = {
        let mut c2 = client(&cluster);
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
            (token_or_nil(&t), start.elapsed())
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
    let t = token_or_nil(
        &redis::cmd("RWLOCK.WLOCK")
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
    let renewed = token_or_nil(
        &redis::cmd("RWLOCK.RENEW")
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
    let t_after = token_or_nil(
        &redis::cmd("RWLOCK.WLOCK")
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
    let t = token_or_nil(
        &redis::cmd("RWLOCK.WLOCK")
            .arg(key)
            .arg("survivor")
            .arg(60_000)
            .query(&mut c)
            .unwrap(),
    )
    .unwrap();
    let replica = cluster.fail_over(key);
    assert_eq!(cluster.owner_of(key).id, replica.id);
    assert_eq!(holders(&mut c, key), vec![("survivor".to_string(), t)]);
    let busy: Value = redis::cmd("RWLOCK.WLOCK")
        .arg(key)
        .arg("intruder")
        .arg(1000)
        .query(&mut c)
        .unwrap();
    assert_eq!(busy, Value::Nil);
    assert_eq!(
        token_or_nil(
            &redis::cmd("RWLOCK.RENEW")
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
    let next = token_or_nil(
        &redis::cmd("RWLOCK.WLOCK")
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

#[test]
fn fenced_writes_refuse_keys_of_another_slot_and_semaphores_route_by_key() {
    let cluster = Cluster::start();
    let mut c = client(&cluster);
    let t: i64 = redis::cmd("RWLOCK.WLOCK")
        .arg("{order:42}")
        .arg("a")
        .arg(60_000)
        .query(&mut c)
        .unwrap();
    // Keys in the lock key's slot (a hash tag): the write runs.
    let ok: String = redis::cmd("LEASE.EXEC")
        .arg("{order:42}")
        .arg(t)
        .arg("SET")
        .arg("{order:42}:data")
        .arg("v")
        .query(&mut c)
        .unwrap();
    assert_eq!(ok, "OK");
    // A key of another slot: CROSSSLOT, nothing runs (asked on the lock key's node).
    let owner = cluster.owner_of("{order:42}");
    let mut node = cluster.node(owner.port).conn();
    let e = redis::cmd("LEASE.EXEC")
        .arg("{order:42}")
        .arg(t)
        .arg("MSET")
        .arg("{order:42}:a")
        .arg("1")
        .arg("elsewhere")
        .arg("2")
        .query::<String>(&mut node)
        .unwrap_err();
    assert_eq!(e.code(), Some("CROSSSLOT"), "{e}");
    let a: Option<String> = redis::cmd("GET").arg("{order:42}:a").query(&mut c).unwrap();
    assert_eq!(a, None);
    // Semaphores route by their key like every other command.
    for k in ["sem:a", "sem:b", "sem:c", "sem:d"] {
        let t: Option<i64> = redis::cmd("SEMAPHORE.ACQUIRE")
            .arg(k)
            .arg("x")
            .arg(2)
            .arg(60_000)
            .query(&mut c)
            .unwrap();
        assert!(t.is_some(), "{k}");
        let n: i64 = redis::cmd("SEMAPHORE.RELEASE")
            .arg(k)
            .arg("x")
            .query(&mut c)
            .unwrap();
        assert_eq!(n, 1);
    }
}
