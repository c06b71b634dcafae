//! Grants acknowledged by replicas (`WAIT numreplicas`) against a real master and replica.

mod common;

use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use common::replica::{freeze, holders, leader_on, replica_of};
use common::*;
use redis_lease_client::{ElectionOptions, Error, LockOptions, LossReason, Wait};

fn acked(ttl_ms: u64) -> LockOptions {
    LockOptions {
        replicas: 1,
        replica_timeout: Duration::from_millis(300),
        ..opts(ttl_ms)
    }
}

/// The question behind `replicas`: Redis's WAIT waits for the replication offset of the
/// connection's own last write. A grant made by hand-off is not the waiting client's own
/// command: it is made by another client's UNLOCK, or by the module's timer at a lapse. Does
/// the waiting connection's WAIT still count it? With the replica frozen (connected, but
/// acknowledging nothing past what it had), a WAIT that counted the grant times out with 0;
/// one that did not would answer 1 at once, as a fresh connection's WAIT does.
#[test]
fn redis_counts_a_hand_off_grant_in_the_waiting_connections_wait_offset() {
    let m = server();
    let r = replica_of(&m);
    for by_timer in [false, true] {
        let key = if by_timer { "ack:lapse" } else { "ack:unlock" };
        let mut a = m.conn();
        let ttl = if by_timer { 800 } else { 60_000 };
        let _: u64 = redis::cmd("RWLOCK.WLOCK")
            .arg(key)
            .arg("a")
            .arg(ttl)
            .query(&mut a)
            .unwrap();
        let (tx, rx) = channel();
        let (go_tx, go_rx) = channel::<()>();
        let url = m.url();
        let waiter = std::thread::spawn(move || {
            let mut b = redis::Client::open(url).unwrap().get_connection().unwrap();
            let token: u64 = redis::cmd("RWLOCK.WLOCK")
                .arg(key)
                .arg("b")
                .arg(60_000)
                .arg("WAIT")
                .arg(10_000)
                .query(&mut b)
                .unwrap();
            let t = Instant::now();
            let frozen: i64 = redis::cmd("WAIT").arg(1).arg(400).query(&mut b).unwrap();
            tx.send((token, frozen, t.elapsed())).unwrap();
            go_rx.recv().unwrap();
            let thawed: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut b).unwrap();
            thawed
        });
        std::thread::sleep(Duration::from_millis(200));
        // Everything so far is on the replica; then it stops acknowledging.
        let _: () = redis::cmd("SET").arg("sync").arg(1).query(&mut a).unwrap();
        let synced: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut a).unwrap();
        assert_eq!(synced, 1);
        let frozen = freeze(&r);
        if !by_timer {
            let released: i64 = redis::cmd("RWLOCK.UNLOCK")
                .arg(key)
                .arg("a")
                .query(&mut a)
                .unwrap();
            assert_eq!(released, 1);
        }
        let (token, acked_frozen, took) = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("the waiter was handed the lock");
        assert!(token > 0);
        assert_eq!(
            acked_frozen, 0,
            "WAIT counted the frozen replica: the hand-off grant (by_timer={by_timer}) is not in the waiting connection's offset"
        );
        assert!(took >= Duration::from_millis(350), "{took:?}");
        // The control: a connection that wrote nothing is satisfied by the frozen replica.
        let mut fresh = m.conn();
        let t = Instant::now();
        let fresh_acked: i64 = redis::cmd("WAIT")
            .arg(1)
            .arg(2_000)
            .query(&mut fresh)
            .unwrap();
        assert_eq!(fresh_acked, 1);
        assert!(t.elapsed() < Duration::from_millis(500));

        drop(frozen);
        go_tx.send(()).unwrap();
        assert_eq!(
            waiter.join().unwrap(),
            1,
            "acknowledged once the replica runs"
        );
        assert_eq!(holders(&r, key), vec![("b".to_string(), token)]);
        let _: i64 = redis::cmd("RWLOCK.UNLOCK")
            .arg(key)
            .arg("b")
            .query(&mut a)
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_count_once_a_replica_has_them_and_renewals_too() {
    let m = server();
    let r = replica_of(&m);
    let conn = connector(&m).await;
    let lock = conn.rwlock("ack:lock").with_options(acked(1_500));

    // A grant at once: on the replica when the guard is handed over. (Asked with a deadline:
    // a loaded machine may delay the replica's acknowledgement past one wait's 300 ms, and
    // the client then gives the grant back and asks again.)
    let g = lock
        .write_timeout(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("granted and acknowledged");
    assert_eq!(
        holders(&r, "ack:lock"),
        vec![(g.owner().to_string(), g.token())]
    );
    // A grant by hand-off: the same.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.write_timeout(Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(g.release().await.unwrap());
    let g = waiter.await.unwrap().unwrap().expect("handed over");
    assert_eq!(
        holders(&r, "ack:lock"),
        vec![(g.owner().to_string(), g.token())]
    );
    // Renewals keep it past the ttl while the replica acknowledges them.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(g.is_held(), "{:?}", g.status());

    // The replica stops acknowledging: renewals no longer count, and the lease is lost when
    // the last acknowledged one runs out.
    let frozen = freeze(&r);
    let t = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("loss reported");
    assert_eq!(reason, LossReason::NotReplicated);
    assert!(
        t.elapsed() <= Duration::from_millis(1_500 + 300),
        "{:?}",
        t.elapsed()
    );

    // While no replica acknowledges, a grant is released and reported.
    let other = conn.rwlock("ack:other").with_options(acked(1_500));
    let err = other.try_write().await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                acked: 0,
                wanted: 1
            }
        ),
        "{err}"
    );
    assert!(other.info().await.unwrap().holders.is_empty(), "released");
    // With a deadline it asks again until the deadline, then reports it.
    let t = Instant::now();
    let err = other
        .write_timeout(Duration::from_millis(1_200))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotReplicated { .. }), "{err}");
    assert!(
        t.elapsed() >= Duration::from_millis(1_000),
        "{:?}",
        t.elapsed()
    );
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(other.info().await.unwrap().holders.is_empty(), "released");

    drop(frozen);
    common::replica::wait_replicas(&m, 1);
    let g = other
        .write_timeout(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("acknowledged again");
    assert!(g.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_counts_once_a_replica_has_it_and_steps_down_when_none_does() {
    let m = server();
    let r = replica_of(&m);
    let conn = connector(&m).await;
    let eopts = ElectionOptions {
        timing: opts(1_500).timing,
        retry: opts(1_500).retry,
        replicas: 1,
        replica_timeout: Duration::from_millis(300),
        campaign_wait: Duration::from_secs(5),
        max_hold: None,
    };
    let e = conn
        .elector("ack:election")
        .with_candidate("a")
        .with_options(eopts)
        .start();
    tokio::time::timeout(Duration::from_secs(5), e.wait_leader())
        .await
        .expect("elected in time")
        .unwrap();
    assert_eq!(leader_on(&r, "ack:election").as_deref(), Some("a"));

    let frozen = freeze(&r);
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), e.lost())
        .await
        .expect("stepped down");
    assert!(
        t.elapsed() <= Duration::from_millis(1_500 + 300),
        "{:?}",
        t.elapsed()
    );
    // It resigned, and cannot lead again while no replica acknowledges.
    assert!(
        eventually(Duration::from_secs(3), || async {
            conn.current_leader("ack:election").await.unwrap().is_none()
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(!e.is_leader());
    drop(frozen);
    tokio::time::timeout(Duration::from_secs(10), e.wait_leader())
        .await
        .expect("leads again once the replica acknowledges")
        .unwrap();
    assert!(e.resign().await.unwrap());
}

/// A semaphore with `replicas`: a grant (at once, and by hand-off) is on the replica when the
/// guard is handed over; with the replica frozen a grant is released and reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_grants_count_once_a_replica_has_them() {
    let m = server();
    let r = replica_of(&m);
    let conn = connector(&m).await;
    let sem = conn.semaphore("ack:sem", 1).with_options(acked(1_500));
    let on_replica = |owner: &str| {
        let mut c = r.conn();
        let v: redis::Value = redis::cmd("SEMAPHORE.INFO")
            .arg("ack:sem")
            .query(&mut c)
            .unwrap();
        format!("{v:?}").contains(owner)
    };
    let g = sem
        .acquire(1, Wait::For(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("granted and acknowledged");
    assert!(on_replica(g.owner()));
    let waiter = {
        let sem = sem.clone();
        tokio::spawn(async move { sem.acquire_timeout(1, Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(g.release().await.unwrap());
    let g = waiter.await.unwrap().unwrap().expect("handed over");
    assert!(on_replica(g.owner()));
    assert!(g.release().await.unwrap());

    let frozen = freeze(&r);
    let err = sem.try_acquire(1).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                acked: 0,
                wanted: 1
            }
        ),
        "{err}"
    );
    assert!(sem.info().await.unwrap().holders.is_empty(), "released");
    drop(frozen);
}
