//! RwLock against a real redis-server with the module.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use redis::AsyncCommands;
use redis_lease_client::{LeaseStatus, LockMode, LossReason, RwLock, Wait};
use tokio::sync::Mutex;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_lock_excludes_many_tasks() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:counter").with_options(opts(5_000));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let lock = lock.clone();
        let tokens = tokens.clone();
        let mut c = raw(&s).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..12 {
                let g = lock.write().await.expect("write lock");
                let v: i64 = c.get("counter").await.unwrap_or(0);
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: () = c.set("counter", v + 1).await.unwrap();
                tokens.lock().await.push(g.token());
                assert!(g.release().await.unwrap(), "hold released");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("tasks finish")
            .unwrap();
    }
    let mut c = raw(&s).await;
    let v: i64 = c.get("counter").await.unwrap();
    assert_eq!(v, 96, "read-modify-write under the lock is exact");
    // Fencing tokens grow with every grant, in the order of the critical sections.
    let tokens = tokens.lock().await;
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // Nothing is left behind.
    let exists: i64 = c.exists("lock:counter").await.unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn readers_share_and_writer_waits_for_them() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:rw").with_options(opts(5_000));
    let r1 = lock.try_read().await.unwrap().expect("first reader");
    let r2 = lock
        .try_read()
        .await
        .unwrap()
        .expect("second reader shares");
    assert!(lock.try_write().await.unwrap().is_none(), "writer excluded");
    let info = lock.info().await.unwrap();
    assert_eq!(info.mode, Some(LockMode::Read));
    assert_eq!(info.holders.len(), 2);
    assert!(info.hold_of(r1.owner(), LockMode::Read).is_some());

    let l2 = lock.clone();
    let writer = tokio::spawn(async move {
        let t = Instant::now();
        let g = l2.write_timeout(Duration::from_secs(10)).await.unwrap();
        (g, t.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        lock.info().await.unwrap().waiters,
        1,
        "the writer waits in the server"
    );
    assert!(
        lock.try_read().await.unwrap().is_none(),
        "a new reader does not overtake a waiting writer"
    );
    r1.release().await.unwrap();
    r2.release().await.unwrap();
    let (g, waited) = writer.await.unwrap();
    let g = g.expect("writer granted on release");
    assert!(waited >= Duration::from_millis(250));
    assert!(g.token() > 0);
    assert_eq!(g.mode(), LockMode::Write);
    g.release().await.unwrap();
}

#[tokio::test]
async fn try_and_timeout_give_none_when_busy() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:busy").with_options(opts(5_000));
    let g = lock.write().await.unwrap();
    assert!(lock.try_read().await.unwrap().is_none());
    let t = Instant::now();
    assert!(lock
        .write_timeout(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(280) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    g.release().await.unwrap();
    assert!(lock.try_write().await.unwrap().is_some());
}

#[tokio::test]
async fn dropped_guard_is_released() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:drop").with_options(opts(30_000));
    drop(lock.write().await.unwrap());
    let other = lock
        .write_timeout(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the dropped guard released the lock long before its ttl");
    other.release().await.unwrap();
}

#[tokio::test]
async fn watchdog_keeps_a_long_critical_section_alive() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:long").with_options(opts(600));
    let g = lock.write().await.unwrap();
    let first_bound = g.valid_until().unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(2_500) {
        assert!(g.is_held(), "still held after {:?}", start.elapsed());
        assert!(lock.try_write().await.unwrap().is_none());
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert!(g.valid_until().unwrap() > first_bound + Duration::from_millis(1_500));
    let info = lock.info().await.unwrap();
    assert_eq!(info.holders.len(), 1);
    assert_eq!(info.holders[0].owner, g.owner());
    assert_eq!(info.holders[0].token, g.token());
    assert!(g.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_loss_is_signalled_before_anyone_else_is_granted() {
    let s = server();
    let conn = connector(&s).await;
    let ttl = 1_000;
    let lock = RwLock::new(&conn, "lock:lost").with_options(opts(ttl));
    let g = lock.write().await.unwrap();
    let acquired = Instant::now();

    // A contender parks in the server's queue.
    let contender = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let g = lock.write_timeout(Duration::from_secs(20)).await;
            (g, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;

    // Freeze the server for longer than the ttl: renewals cannot get through.
    let url = s.url();
    let sleeper = std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let t = Instant::now();
        let _: redis::RedisResult<()> = redis::cmd("DEBUG").arg("SLEEP").arg(2.5).query(&mut c);
        t.elapsed()
    });
    let reason = tokio::time::timeout(Duration::from_secs(10), g.lost())
        .await
        .expect("loss signalled");
    let lost_at = Instant::now();
    assert_eq!(reason, LossReason::Expired);
    assert!(
        lost_at - acquired <= Duration::from_millis(ttl + 300),
        "lost after {:?}",
        lost_at - acquired
    );
    assert!(matches!(g.status(), LeaseStatus::Lost(_)));
    assert!(g.check().is_err());

    let (granted, granted_at) = contender.await.unwrap();
    let granted = granted
        .unwrap()
        .expect("the contender gets the lock after the lapse");
    assert!(
        lost_at < granted_at,
        "loss signalled {:?} before the other grant",
        granted_at - lost_at
    );
    assert!(granted.token() > g.token());
    sleeper.join().unwrap();
    granted.release().await.unwrap();
    // The lost guard's release finds nothing to release.
    assert!(!g.release().await.unwrap());
}

#[tokio::test]
async fn deleting_the_key_revokes_the_lease() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:del").with_options(opts(900));
    let g = lock.write().await.unwrap();
    let mut c = raw(&s).await;
    let _: i64 = c.del("lock:del").await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("loss signalled");
    assert_eq!(reason, LossReason::Revoked);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquisition_retries_across_a_server_restart() {
    let mut s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:restart").with_options(opts(5_000));
    s.kill9();
    let restarter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(1_000));
        s.restart(None);
        s
    });
    let t = Instant::now();
    let g = lock
        .write_timeout(Duration::from_secs(20))
        .await
        .expect("retried until the server came back")
        .expect("granted");
    assert!(t.elapsed() >= Duration::from_millis(900));
    let s = restarter.join().unwrap();
    assert!(g.is_held());
    assert!(g.release().await.unwrap());
    drop(s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lease_survives_a_quick_restart_with_aof() {
    let mut s = redis_lease_testkit::Server::with(
        redis_lease_testkit::Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:aof").with_options(opts(3_000));
    let g = lock.write().await.unwrap();
    let token = g.token();
    s.kill9();
    let s = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(300));
        s.restart(None);
        s
    })
    .await
    .unwrap();
    // Through several renewal periods after the restart.
    tokio::time::sleep(Duration::from_millis(3_500)).await;
    assert!(g.is_held(), "{:?}", g.status());
    let info = lock.info().await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].token, token);
    assert!(g.release().await.unwrap());
    drop(s);
}

#[tokio::test]
async fn upgrade_conflict_is_a_deadlock_error() {
    let s = server();
    let conn = connector(&s).await;
    let a = RwLock::new(&conn, "lock:up")
        .with_options(opts(5_000))
        .with_owner("a");
    let b = RwLock::new(&conn, "lock:up")
        .with_options(opts(5_000))
        .with_owner("b");
    let ra = a.try_read().await.unwrap().unwrap();
    let rb = b.try_read().await.unwrap().unwrap();
    let a2 = a.clone();
    let up_a = tokio::spawn(async move { a2.write_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err = b.write_timeout(Duration::from_secs(5)).await.unwrap_err();
    assert!(
        matches!(err, redis_lease_client::Error::Deadlock(_)),
        "{err}"
    );
    rb.release().await.unwrap();
    let wa = up_a.await.unwrap().unwrap().expect("a upgrades");
    wa.release().await.unwrap();
    ra.release().await.unwrap();
}

#[test]
fn blocking_api() {
    let s = server();
    let client = redis_lease_client::blocking::Client::open(&s.url()).unwrap();
    let lock = client.rwlock("lock:blocking").with_options(opts(600));
    let g = lock.write().unwrap();
    assert!(lock.try_read().unwrap().is_none());
    assert!(
        g.wait_lost(Duration::from_millis(1_500)).is_none(),
        "renewed"
    );
    assert!(g.is_held());
    assert!(g.release().unwrap());
    let r = lock.read_timeout(Duration::from_secs(1)).unwrap().unwrap();
    drop(r);
    assert!(
        lock.try_write().unwrap().is_some(),
        "drop released the read lock"
    );
}

/// A grant whose reply is lost (the server freezes right after granting, the client gives up
/// waiting for the reply) is adopted through RWLOCK.INFO: one hold, no surplus, no leak.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_was_lost_is_adopted_not_duplicated() {
    let s = server();
    let conn = connector(&s)
        .await
        .with_command_timeout(Duration::from_millis(1_500));
    let lock = RwLock::new(&conn, "lock:lost-reply").with_options(opts(8_000));
    let mut c = s.conn();
    let _: u64 = redis::cmd("RWLOCK.WLOCK")
        .arg("lock:lost-reply")
        .arg("h")
        .arg(10_000)
        .query(&mut c)
        .unwrap();
    let contender = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            (
                lock.write_timeout(Duration::from_millis(600)).await,
                t.elapsed(),
            )
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Release (which grants the waiting contender) and freeze the server before the reply goes
    // out; the contender's reply limit (600 + 1500 ms) runs out during the freeze.
    let (released, ()): (i64, ()) = redis::pipe()
        .cmd("RWLOCK.UNLOCK")
        .arg("lock:lost-reply")
        .arg("h")
        .cmd("DEBUG")
        .arg("SLEEP")
        .arg(3)
        .query(&mut c)
        .unwrap();
    assert_eq!(released, 1);
    let (g, took) = contender.await.unwrap();
    let g = g.expect("adopted, not an error").expect("granted");
    assert!(
        took > Duration::from_millis(2_000),
        "{took:?}: the reply was really lost"
    );
    assert!(g.is_held());
    let info = lock.info().await.unwrap();
    assert_eq!(info.holders.len(), 1, "{info:?}");
    assert_eq!(info.holders[0].owner, g.owner());
    assert_eq!(info.holders[0].count, 1, "no second hold: {info:?}");
    assert_eq!(info.holders[0].token, g.token());
    assert!(g.release().await.unwrap());
    let exists: i64 = redis::cmd("EXISTS")
        .arg("lock:lost-reply")
        .query(&mut c)
        .unwrap();
    assert_eq!(exists, 0, "nothing left behind");
}

#[tokio::test]
async fn a_waiter_whose_key_is_deleted_gets_lock_gone() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:gone").with_options(opts(5_000));
    let _held = lock.write().await.unwrap();
    let l2 = lock.clone();
    let waiter = tokio::spawn(async move { l2.write_timeout(Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = raw(&s).await;
    let _: i64 = c.del("lock:gone").await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("answered at once")
        .unwrap()
        .unwrap_err();
    assert!(
        matches!(err, redis_lease_client::Error::LockGone(_)),
        "{err}"
    );
}

/// Like a client that reaches a demoted master during a failover: READONLY is retried until the
/// server accepts writes again (within the caller's deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readonly_is_retried_until_the_server_is_promoted() {
    let s = server();
    let conn = connector(&s).await;
    let lock = RwLock::new(&conn, "lock:ro").with_options(opts(5_000));
    let mut c = raw(&s).await;
    // A replica of a master that does not exist (a free loopback port): read-only.
    let nowhere = redis_lease_testkit::free_port().to_string();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(&nowhere)
        .query_async(&mut c)
        .await
        .unwrap();
    let promote = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query_async(&mut c)
            .await
            .unwrap();
    });
    let t = Instant::now();
    let g = lock
        .write_timeout(Duration::from_secs(10))
        .await
        .expect("READONLY retried")
        .expect("granted after the promotion");
    assert!(
        t.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t.elapsed()
    );
    promote.await.unwrap();
    assert!(g.release().await.unwrap());
}

#[tokio::test]
async fn works_over_a_callers_connection_manager() {
    let s = server();
    let client = s.client();
    let manager = client.get_connection_manager().await.unwrap();
    let conn = redis_lease_client::Client::from_manager(client, manager);
    let lock = RwLock::new(&conn, "lock:manager").with_options(opts(2_000));
    let g = lock.write().await.unwrap();
    assert!(lock.try_write().await.unwrap().is_none());
    let l2 = lock.clone();
    let waiter = tokio::spawn(async move { l2.read_timeout(Duration::from_secs(5)).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.release().await.unwrap();
    let r = waiter
        .await
        .unwrap()
        .unwrap()
        .expect("reader granted on release");
    assert_eq!(r.mode(), LockMode::Read);
    r.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_guard_downgrades_without_letting_go_and_upgrades_back() {
    let s = server();
    let conn = connector(&s).await;
    let lock = conn.rwlock("lock:grade").with_options(opts(900));
    let mut g = lock.write().await.unwrap();
    let token = g.token();
    assert!(
        lock.try_read().await.unwrap().is_none(),
        "a writer excludes readers"
    );

    g.downgrade().await.unwrap();
    assert_eq!(g.mode(), LockMode::Read);
    assert_eq!(g.token(), token, "a downgrade keeps the token");
    let info = lock.info().await.unwrap();
    assert_eq!(info.mode, Some(LockMode::Read), "{info:?}");
    assert_eq!(
        info.holders.len(),
        1,
        "only the read hold is left: {info:?}"
    );
    assert!(info.hold_of(g.owner(), LockMode::Read).is_some());
    let other = lock
        .try_read()
        .await
        .unwrap()
        .expect("readers join after the downgrade");
    assert!(lock.try_write().await.unwrap().is_none());

    // With another reader present the upgrade is not granted at once; with a wait it is,
    // ahead of the queue, when that reader leaves.
    assert!(!g.upgrade(Wait::No).await.unwrap());
    assert_eq!(g.mode(), LockMode::Read);
    let leaves = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        other.release().await.unwrap();
    });
    let t = Instant::now();
    assert!(g.upgrade(Wait::For(Duration::from_secs(5))).await.unwrap());
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    leaves.await.unwrap();
    assert_eq!(g.mode(), LockMode::Write);
    assert!(
        g.token() > token,
        "an upgrade is a new grant: {} > {token}",
        g.token()
    );
    assert!(lock.try_read().await.unwrap().is_none());

    // The watchdog keeps renewing both holds (one lease per owner), past the ttl.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(g.is_held(), "{:?}", g.status());
    let info = lock.info().await.unwrap();
    assert!(
        info.hold_of(g.owner(), LockMode::Write).is_some(),
        "{info:?}"
    );
    assert!(
        info.hold_of(g.owner(), LockMode::Read).is_some(),
        "{info:?}"
    );

    // The release gives back both holds: nothing is left.
    assert!(g.release().await.unwrap());
    let mut c = raw(&s).await;
    let exists: i64 = c.exists("lock:grade").await.unwrap();
    assert_eq!(exists, 0);
}

#[tokio::test]
async fn a_ttl_too_short_to_renew_is_refused_when_the_lock_is_made() {
    let s = server();
    let conn = connector(&s).await;
    let err = conn
        .rwlock("lock:short")
        .with_ttl(Duration::from_millis(2))
        .unwrap_err();
    assert!(
        matches!(err, redis_lease_client::Error::InvalidArgument(_)),
        "{err}"
    );
    assert!(conn
        .rwlock("lock:short")
        .with_ttl(Duration::from_millis(4))
        .is_ok());
}
