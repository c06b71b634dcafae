//! The client through Redis Sentinel (`redis+sentinel://`): a master with the module, its
//! replicas, and three sentinels with `down-after-milliseconds 1000`. Guards and elections
//! carry on through a `SENTINEL FAILOVER` and through a `kill -9` of the master when their
//! holds reached the replicas (replicas = 1); a hold that never reached the replica that is
//! promoted is reported lost, as `Revoked`.

mod common;

use std::time::{Duration, Instant};

use futures_util::StreamExt;

use common::replica::{holders, leader_on};
use common::sentinel::Group;
use common::*;
use redis_lease_client::{Client, ElectionOptions, LeaseTiming, LockOptions, LossReason};

fn acked(ttl_ms: u64) -> LockOptions {
    LockOptions {
        replicas: 1,
        replica_timeout: Duration::from_millis(500),
        ..opts(ttl_ms)
    }
}

fn acked_election(ttl_ms: u64) -> ElectionOptions {
    ElectionOptions {
        timing: LeaseTiming::new(Duration::from_millis(ttl_ms)).unwrap(),
        retry: opts(ttl_ms).retry,
        replicas: 1,
        replica_timeout: Duration::from_millis(500),
        campaign_wait: Duration::from_secs(5),
        max_hold: None,
    }
}

/// Polls (every 50 ms, off the runtime's threads) until `f` holds; fails after `limit`.
async fn until(what: &str, limit: Duration, f: impl Fn() -> bool + Send + 'static) {
    let ok = tokio::task::spawn_blocking(move || {
        let start = Instant::now();
        while start.elapsed() < limit {
            if f() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    })
    .await
    .unwrap();
    assert!(ok, "{what}: not within {limit:?}");
}

/// A guard and a leader, with their holds acknowledged by a replica, carry on through a
/// failover: no loss, same token and term, renewed on the new master, and nobody else is
/// granted the lock. `kill`: the master dies (`kill -9`) instead of `SENTINEL FAILOVER`.
async fn carry_on_through(kill: bool) {
    let mut group = tokio::task::spawn_blocking(|| Group::start(2))
        .await
        .unwrap();
    let client = Client::open(&group.url())
        .await
        .expect("connect through sentinel");
    let old = group.master_port();
    assert_eq!(
        client.master_addr().unwrap().to_string(),
        format!("127.0.0.1:{old}")
    );
    let ttl = 12_000;
    let lock = client.rwlock("sentinel:lock").with_options(acked(ttl));
    let guard = lock.write().await.expect("write lock");
    let election = client
        .elector("sentinel:election")
        .with_candidate("a")
        .with_options(acked_election(ttl))
        .start();
    let term = tokio::time::timeout(Duration::from_secs(10), election.wait_leader())
        .await
        .expect("elected in time")
        .unwrap();
    let mut observer = client
        .observe("sentinel:election", Default::default())
        .await
        .unwrap();
    assert_eq!(observer.current().map(|l| l.term), Some(term));
    // And an observer on a client of its own that sends nothing else: only the sentinels'
    // announcements can move it.
    let listener = Client::open(&group.url()).await.unwrap();
    let mut lone_observer = listener
        .observe("sentinel:other", Default::default())
        .await
        .unwrap();
    assert!(lone_observer.current().is_none());
    // Both replicas have both (one acknowledged each grant; the other follows), so whichever
    // the sentinels promote has them.
    let (owner, token) = (guard.owner().to_string(), guard.token());
    let replicas: Vec<u16> = group.servers[1..].iter().map(|s| s.port).collect();
    for port in &replicas {
        let url = format!("redis://127.0.0.1:{port}/");
        let (owner, url2) = (owner.clone(), url.clone());
        until(
            "the hold reached a replica",
            Duration::from_secs(5),
            move || {
                let s = redis::Client::open(url2.as_str()).unwrap();
                let mut c = s.get_connection().unwrap();
                let v: redis::Value = redis::cmd("RWLOCK.INFO")
                    .arg("sentinel:lock")
                    .query(&mut c)
                    .unwrap();
                format!("{v:?}").contains(&owner)
            },
        )
        .await;
        until(
            "the leadership reached a replica",
            Duration::from_secs(5),
            move || {
                let s = redis::Client::open(url.as_str()).unwrap();
                let mut c = s.get_connection().unwrap();
                let v: redis::Value = redis::cmd("LEADER.CURRENT")
                    .arg("sentinel:election")
                    .query(&mut c)
                    .unwrap();
                format!("{v:?}").contains("\"a\"")
            },
        )
        .await;
    }

    // Any moment without leadership, from here on, is a failure.
    let mut rx = election.watch();
    let flapped = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            if !rx.borrow_and_update().is_leader {
                return;
            }
        }
    });

    // When the sentinel the clients listen to first announces the switch.
    let announced = {
        let port = group.sentinels[0].port;
        tokio::spawn(async move {
            let c = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
            let mut ps = c.get_async_pubsub().await.unwrap();
            ps.subscribe("+switch-master").await.unwrap();
            ps.into_on_message().next().await;
            Instant::now()
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    let t = Instant::now();
    if kill {
        group.servers[0].kill9();
    } else {
        group.failover();
    }
    let waiting = tokio::task::spawn_blocking(move || {
        let new = group.wait_new_master(old, Duration::from_secs(20));
        (group, new)
    });
    tokio::pin!(waiting);
    // The guard's loss would be final: checking it now and then is enough.
    let (group, new) = loop {
        tokio::select! {
            r = &mut waiting => break r.unwrap(),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {
                assert!(guard.is_held(), "guard lost during the failover: {:?}", guard.status());
            }
        }
    };
    let failover_took = t.elapsed();
    // At once after the failover (before Sentinel gets round to demoting a master that still
    // runs), a change on the new master reaches the lone observer.
    {
        let mut c = group.server(new).conn();
        let _: u64 = redis::cmd("LEADER.CAMPAIGN")
            .arg("sentinel:other")
            .arg("z")
            .arg(60_000)
            .query(&mut c)
            .unwrap();
    }
    let announced = tokio::time::timeout(Duration::from_secs(15), announced)
        .await
        .expect("+switch-master announced")
        .unwrap();
    let seen = tokio::time::timeout_at(
        (announced + Duration::from_secs(3)).into(),
        lone_observer.changed(),
    )
    .await
    .expect("the lone observer follows the announced failover")
    .unwrap();
    assert_eq!(seen.map(|l| l.candidate).as_deref(), Some("z"));
    assert_eq!(
        listener.master_addr().unwrap().to_string(),
        format!("127.0.0.1:{new}")
    );
    eprintln!("failover (kill={kill}) to port {new} after {failover_took:?}");
    // Two more renewal periods on the new master.
    let observe_until = Instant::now() + Duration::from_millis(ttl / 3 * 2 + 1_000);
    while Instant::now() < observe_until {
        assert!(
            guard.is_held(),
            "guard lost after the failover: {:?}",
            guard.status()
        );
        assert!(
            election.is_leader(),
            "leader lost: {:?}",
            election.leadership()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!flapped.is_finished(), "leadership was lost for a while");
    flapped.abort();
    assert_eq!(
        group.master_port(),
        new,
        "the sentinels failed over a second time: {}",
        group.sentinels[0].log()
    );
    assert_eq!(
        client.master_addr().unwrap().to_string(),
        format!("127.0.0.1:{new}"),
        "the client moved to the new master"
    );
    let promoted = group.server(new);
    assert_eq!(holders(promoted, "sentinel:lock"), vec![(owner, token)]);
    assert_eq!(
        leader_on(promoted, "sentinel:election").as_deref(),
        Some("a")
    );
    assert_eq!(election.leadership().term, Some(term));
    // Renewed there: its lease on the new master is younger than the failover.
    let left = lock.info().await.unwrap().holders[0].ttl;
    assert!(left > Duration::from_millis(ttl / 2), "{left:?}");
    // Nobody else gets it.
    let other = client.rwlock("sentinel:lock").with_options(acked(ttl));
    assert!(other.try_write().await.unwrap().is_none());
    assert!(guard.release().await.unwrap(), "released on the new master");
    assert!(election.resign().await.unwrap());
    // The observer follows the election on the new master too (it moved with the client's
    // requests, or with the sentinels' +switch-master: the old master, even when it still
    // runs, publishes nothing of what happens on the new one).
    let t = Instant::now();
    let seen = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            if observer.changed().await.unwrap().is_none() {
                break;
            }
        }
    })
    .await;
    eprintln!(
        "observer saw the resignation after {:?} (kill={kill})",
        t.elapsed()
    );
    assert!(
        seen.is_ok(),
        "the observer missed the resignation on the new master"
    );
    drop(group);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_and_a_leader_carry_on_through_a_sentinel_failover() {
    carry_on_through(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_and_a_leader_carry_on_when_the_master_is_killed() {
    carry_on_through(true).await;
}

/// Without replica acknowledgements a grant may never reach the replica that is promoted:
/// here the replica's link is broken (a wrong `masterauth`) before the grant, then the master
/// is killed. The guard's renewals reach the new master, which knows nothing of it: the loss
/// is reported as `Revoked`. The blocking API goes through Sentinel alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_the_promoted_replica_never_had_is_reported_revoked() {
    let mut group = tokio::task::spawn_blocking(|| Group::start(1))
        .await
        .unwrap();
    let url = group.url();
    let blocking = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || {
            let c = redis_lease_client::blocking::Client::open(&url).unwrap();
            let g = c
                .rwlock("sentinel:blocking")
                .try_write()
                .unwrap()
                .expect("free");
            assert!(g.release().unwrap());
        })
    };
    blocking.await.unwrap();

    // Cut the replica off: it reconnects, fails to authenticate, and stays behind.
    {
        let r = &group.servers[1];
        let mut c = r.conn();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("masterauth")
            .arg("not-the-password")
            .query(&mut c)
            .unwrap();
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("master")
            .query(&mut c)
            .unwrap();
    }
    let rurl = group.servers[1].url();
    until(
        "the replica's link is down",
        Duration::from_secs(10),
        move || {
            let mut c = redis::Client::open(rurl.as_str())
                .unwrap()
                .get_connection()
                .unwrap();
            let info: String = redis::cmd("INFO").arg("replication").query(&mut c).unwrap();
            info.contains("master_link_status:down")
        },
    )
    .await;

    let client = Client::open(&url).await.unwrap();
    let lock = client.rwlock("sentinel:unseen").with_options(opts(10_000));
    let guard = lock
        .try_write()
        .await
        .unwrap()
        .expect("granted by the master");
    assert!(holders(&group.servers[1], "sentinel:unseen").is_empty());

    let old = group.master_port();
    group.servers[0].kill9();
    let t = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(25), guard.lost())
        .await
        .expect("the loss is reported");
    eprintln!("loss reported {:?} after the kill", t.elapsed());
    assert_eq!(reason, LossReason::Revoked);
    let new = tokio::task::spawn_blocking(move || {
        let new = group.wait_new_master(old, Duration::from_secs(5));
        drop(group);
        new
    })
    .await
    .unwrap();
    assert_ne!(new, old);
}
