//! MultiLock (RWLOCK.MLOCK) against a real redis-server with the module: transfers that need
//! two accounts, one watchdog for every key, the Deadlock error, and the MaxHold loss.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis::AsyncCommands;
use redis_lease_client::{Error, LockMode, LossReason, RwLock, Wait};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfers_under_multi_locks_lose_no_update() {
    let s = server();
    let conn = connector(&s).await;
    const ACCOUNTS: usize = 5;
    let mut c = raw(&s).await;
    for a in 0..ACCOUNTS {
        let _: () = c.set(format!("bal:{a}"), 100).await.unwrap();
    }
    let mut tasks = Vec::new();
    for w in 0..6usize {
        let conn = conn.clone();
        let mut c = raw(&s).await;
        tasks.push(tokio::spawn(async move {
            for i in 0..15usize {
                let from = (w + i) % ACCOUNTS;
                let to = (w * 3 + i * 7 + 1) % ACCOUNTS;
                if from == to {
                    continue;
                }
                let lock = conn
                    .rwlock_many([format!("acct:{from}"), format!("acct:{to}")])
                    .unwrap()
                    .with_options(opts(5_000));
                let g = lock.write(Wait::Forever).await.unwrap().expect("granted");
                assert_eq!(g.tokens().len(), 2);
                let a: i64 = c.get(format!("bal:{from}")).await.unwrap();
                let b: i64 = c.get(format!("bal:{to}")).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                let _: () = c.set(format!("bal:{from}"), a - 1).await.unwrap();
                let _: () = c.set(format!("bal:{to}"), b + 1).await.unwrap();
                assert!(g.release().await.unwrap());
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("tasks finish")
            .unwrap();
    }
    let mut total = 0;
    for a in 0..ACCOUNTS {
        let v: i64 = c.get(format!("bal:{a}")).await.unwrap();
        total += v;
    }
    assert_eq!(total, 100 * ACCOUNTS as i64, "a lost update");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_watchdog_keeps_every_key_and_release_frees_them() {
    let s = server();
    let conn = connector(&s).await;
    let lock = conn
        .rwlock_many(["x", "y", "z"])
        .unwrap()
        .with_options(opts(600));
    let g = lock.read(Wait::No).await.unwrap().expect("granted");
    assert_eq!(g.mode(), LockMode::Read);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(g.is_held(), "{:?}", g.status());
    for k in ["x", "y", "z"] {
        let info = conn.rwlock(k).info().await.unwrap();
        assert!(
            info.holders.iter().any(|h| h.owner == g.owner()),
            "{k}: {info:?}"
        );
    }
    // A writer cannot get in meanwhile.
    let w = conn.rwlock_many(["y"]).unwrap().with_options(opts(600));
    assert!(w.write(Wait::No).await.unwrap().is_none());
    assert!(g.release().await.unwrap());
    assert!(w.write(Wait::No).await.unwrap().is_some());
    assert!(conn.rwlock_many(["a", "a"]).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_that_would_deadlock_is_a_typed_error() {
    let s = server();
    let conn = connector(&s).await;
    let o1 = RwLock::new(&conn, "a")
        .with_owner("o1")
        .with_options(opts(10_000));
    let o2 = RwLock::new(&conn, "b")
        .with_owner("o2")
        .with_options(opts(10_000));
    let _ga = o1.write().await.unwrap();
    let _gb = o2.write().await.unwrap();
    let waiter = RwLock::new(&conn, "b")
        .with_owner("o1")
        .with_options(opts(10_000));
    let parked = tokio::spawn(async move {
        waiter
            .acquire(LockMode::Write, Wait::For(Duration::from_secs(5)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let closing = RwLock::new(&conn, "a")
        .with_owner("o2")
        .with_options(opts(10_000));
    let t0 = Instant::now();
    let r = closing
        .acquire(LockMode::Write, Wait::For(Duration::from_secs(5)))
        .await;
    assert!(matches!(r, Err(Error::Deadlock(_))), "{r:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    parked.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_at_its_cap_is_lost_with_max_hold() {
    let s = server();
    let conn = connector(&s).await;
    let lock = conn
        .rwlock_many(["m1", "m2"])
        .unwrap()
        .with_options(opts(600))
        .with_max_hold(Duration::from_millis(1_000));
    let g = lock.write(Wait::No).await.unwrap().expect("granted");
    let t0 = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(10), g.lost())
        .await
        .expect("lost");
    assert_eq!(reason, LossReason::MaxHold);
    assert!(
        t0.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        t0.elapsed()
    );
    // A single lock's ttl past its max hold is a typed error.
    let one = RwLock::new(&conn, "solo").with_options(redis_lease_client::LockOptions {
        max_hold: Some(Duration::from_millis(100)),
        ..opts(600)
    });
    assert!(matches!(one.write().await, Err(Error::MaxHold(_))));
}
