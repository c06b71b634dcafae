//! The client crate on a real Redis Cluster (3 masters, 3 replicas, the module on every node):
//! locks over every master, and a master failed over to its replica while a guard is held and
//! a writer waits. The guard's watchdog keeps renewing through the failover, the waiter is
//! served by the new master, and an elector keeps its leadership.

mod common;

use std::time::Duration;

use common::opts;
use redis_lease_client::{Client, Error, LeaderElector, LeaseStatus, RwLock};
use redis_lease_testkit::cluster::Cluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_carries_on_through_a_cluster_failover() {
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let conn = Client::cluster(cluster.urls())
        .await
        .expect("cluster connector");

    // Locks on keys over every master.
    let mut guards = Vec::new();
    for i in 0..30 {
        let lock = RwLock::new(&conn, format!("spread:{i}")).with_options(opts(5_000));
        guards.push(lock.try_write().await.unwrap().expect("free lock"));
    }
    for g in guards {
        assert!(g.release().await.unwrap());
    }
    // Acknowledged by each master's replica: the WAIT goes with the lock command to the
    // key's master (a pipeline routed by its first key), for keys over every master. (The
    // replicas may still be in their first sync: a grant too few acknowledged is asked for
    // again within the wait.)
    for i in 0..6 {
        let lock = RwLock::new(&conn, format!("acked:{i}"))
            .with_options(opts(5_000))
            .with_replicas(1);
        let g = lock
            .write_timeout(Duration::from_secs(20))
            .await
            .unwrap()
            .expect("acknowledged");
        assert!(g.release().await.unwrap());
    }

    let key = "failover:lock";
    let lock = RwLock::new(&conn, key).with_options(opts(3_000));
    let guard = lock.write().await.expect("write lock");
    let first = guard.token();
    let election = LeaderElector::new(&conn, "{failover:lock}:leader")
        .with_ttl(Duration::from_millis(3_000))
        .unwrap()
        .start();
    let term = tokio::time::timeout(Duration::from_secs(10), election.wait_leader())
        .await
        .expect("elected in time")
        .unwrap();

    // A writer parks in the server, on the master that is about to be demoted.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write_timeout(Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    let c = tokio::task::spawn_blocking(move || {
        let new_master = cluster.fail_over(key);
        (cluster, new_master)
    });
    let (cluster, new_master) = c.await.unwrap();
    assert_eq!(cluster.owner_of(key).id, new_master.id);

    // Two lease lengths later the guard and the leader still hold: renewals reached the new
    // master.
    tokio::time::sleep(Duration::from_millis(6_000)).await;
    assert!(
        matches!(guard.status(), LeaseStatus::Held { .. }),
        "the guard's lease survived the failover: {:?}",
        guard.status()
    );
    guard.check().expect("still held");
    let leadership = election.leadership();
    assert!(leadership.is_leader, "still leader: {leadership:?}");
    assert_eq!(leadership.term, Some(term), "same term");

    // Releasing hands the lock to the waiter, through the new master.
    assert!(guard.release().await.unwrap());
    let next = tokio::time::timeout(Duration::from_secs(30), waiter)
        .await
        .expect("the waiter finishes")
        .unwrap()
        .expect("no error")
        .expect("the waiter got the lock");
    assert!(next.token() > first, "a larger token after the failover");
    assert!(next.release().await.unwrap());
    assert!(election.resign().await.unwrap());
}

/// Semaphores on keys over every master, and `exec` in a cluster: the command's keys must
/// hash to the lock key's slot (a hash tag); a key of another slot is CROSSSLOT and nothing
/// runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphores_and_exec_in_a_cluster() {
    let cluster = tokio::task::spawn_blocking(Cluster::start).await.unwrap();
    let conn = Client::cluster(cluster.urls())
        .await
        .expect("cluster connector");
    let mut guards = Vec::new();
    for i in 0..12 {
        let sem = conn
            .semaphore(format!("sem:{i}"), 2)
            .with_options(opts(5_000));
        guards.push(sem.try_acquire(2).await.unwrap().expect("free"));
        assert!(sem.try_acquire(1).await.unwrap().is_none(), "full");
    }
    for g in guards {
        assert!(g.release().await.unwrap());
    }

    let g = RwLock::new(&conn, "{order:42}")
        .with_options(opts(5_000))
        .write()
        .await
        .unwrap();
    let ok: String = g
        .exec(redis::cmd("SET").arg("{order:42}:data").arg("v"))
        .await
        .unwrap();
    assert_eq!(ok, "OK");
    // "other" hashes to another slot than "{order:42}".
    let other = "other";
    let mut c = cluster.node(cluster.owner_of(other).port).conn();
    let slots: (i64, i64) = (
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(other)
            .query(&mut c)
            .unwrap(),
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg("{order:42}")
            .query(&mut c)
            .unwrap(),
    );
    assert_ne!(slots.0, slots.1);
    let err = g
        .exec::<String>(redis::cmd("SET").arg(other).arg("v"))
        .await
        .unwrap_err();
    match &err {
        Error::Redis(e) => assert_eq!(e.code(), Some("CROSSSLOT"), "{e}"),
        other => panic!("{other}"),
    }
    let two = redis::cmd("MSET")
        .arg("{order:42}:a")
        .arg(1)
        .arg(other)
        .arg(2)
        .to_owned();
    let err = g.exec::<String>(&two).await.unwrap_err();
    assert!(
        matches!(&err, Error::Redis(e) if e.code() == Some("CROSSSLOT")),
        "{err}"
    );
    assert!(g.is_held(), "CROSSSLOT is not a loss");
    let none: Option<String> = redis::cmd("GET").arg(other).query(&mut c).unwrap();
    assert_eq!(none, None, "nothing ran");
    let v: Option<String> = conn
        .query(redis::cmd("GET").arg("{order:42}:data"))
        .await
        .map(|v| redis::from_redis_value(v).unwrap())
        .unwrap();
    assert_eq!(v.as_deref(), Some("v"));
    let a: redis::Value = conn
        .query(redis::cmd("EXISTS").arg("{order:42}:a"))
        .await
        .unwrap();
    assert_eq!(a, redis::Value::Int(0), "nothing of the MSET ran");
    assert!(g.release().await.unwrap());
}
