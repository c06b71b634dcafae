//! Semaphore against a real redis-server with the module.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::replica::freeze;
use common::*;
use redis::AsyncCommands;
use redis_lease_client::{Error, InvalidArgument, LeaseStatus, LossReason, Semaphore};

/// Tasks take 1 or 2 permits of 3, over and over; each records its permits on entry (after
/// the grant) and takes them off on exit (before the release): the count never exceeds the
/// limit, every grant has its own token, nothing is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_limit_permits_are_held_at_once_across_many_tasks() {
    let s = server();
    let conn = connector(&s).await;
    let limit = 3;
    let sem = Semaphore::new(&conn, "sem:limit", limit).with_options(opts(5_000));
    let inside = Arc::new(AtomicU32::new(0));
    let most = Arc::new(AtomicU32::new(0));
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..10u32 {
        let (sem, inside, most, tokens) =
            (sem.clone(), inside.clone(), most.clone(), tokens.clone());
        let permits = 1 + i % 2;
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let g = sem.take(permits).await.expect("acquire");
                let now = inside.fetch_add(permits, Ordering::SeqCst) + permits;
                most.fetch_max(now, Ordering::SeqCst);
                assert!(now <= limit, "{now} permits held at once, limit {limit}");
                tokens.lock().unwrap().push(g.token());
                tokio::time::sleep(Duration::from_millis(3)).await;
                inside.fetch_sub(permits, Ordering::SeqCst);
                assert!(g.release().await.unwrap(), "still held at release");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(60), t)
            .await
            .expect("tasks finish")
            .unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        (2..=limit).contains(&most),
        "most permits held at once: {most}"
    );
    let mut tokens = tokens.lock().unwrap().clone();
    let n = tokens.len();
    tokens.sort_unstable();
    tokens.dedup();
    assert_eq!((tokens.len(), n), (80, 80), "every grant has its own token");
    let mut c = raw(&s).await;
    let exists: i64 = c.exists("sem:limit").await.unwrap();
    assert_eq!(exists, 0, "nothing left behind");
}

/// Strict FIFO with mixed sizes: a request for 3 permits at the head of the queue is not
/// overtaken by a request for 1 behind it, although 1 permit is free all along.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_request_at_the_head_is_not_overtaken_by_smaller_ones() {
    let s = server();
    let conn = connector(&s).await;
    let sem = conn.semaphore("sem:fifo", 3).with_options(opts(5_000));
    let held = sem.take(2).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let waiter = |permits: u32| {
        let (sem, order) = (sem.clone(), order.clone());
        tokio::spawn(async move {
            let g = sem
                .acquire_timeout(permits, Duration::from_secs(20))
                .await
                .unwrap()
                .expect("granted in time");
            order.lock().unwrap().push((permits, Instant::now()));
            g
        })
    };
    let big = waiter(3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let small = waiter(1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let info = sem.info().await.unwrap();
    assert_eq!((info.used, info.waiters), (2, 2), "{info:?}");
    assert!(
        sem.try_acquire(1).await.unwrap().is_none(),
        "a free permit, but requests wait before this one"
    );
    assert!(order.lock().unwrap().is_empty(), "nobody overtook the head");

    let released = Instant::now();
    assert!(held.release().await.unwrap());
    let big = tokio::time::timeout(Duration::from_secs(10), big)
        .await
        .expect("the head is granted on release")
        .unwrap();
    assert_eq!(big.permits(), 3);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        order.lock().unwrap().len(),
        1,
        "the small request still waits"
    );
    let big_out = Instant::now();
    let big_token = big.token();
    assert!(big.release().await.unwrap());
    let small = tokio::time::timeout(Duration::from_secs(10), small)
        .await
        .expect("granted after the head")
        .unwrap();
    let order = order.lock().unwrap().clone();
    assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), [3, 1]);
    assert!(order[0].1 >= released && order[1].1 >= big_out, "{order:?}");
    assert!(small.token() > big_token);
    assert!(small.release().await.unwrap());
}

#[tokio::test]
async fn try_and_timeout_give_none_when_full_and_info_reports_it() {
    let s = server();
    let conn = connector(&s).await;
    let sem = conn.semaphore("sem:full", 2).with_options(opts(5_000));
    let g = sem.take(2).await.unwrap();
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let t = Instant::now();
    let none = sem
        .acquire_timeout(1, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(none.is_none());
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(280) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let info = sem.info().await.unwrap();
    assert_eq!((info.limit, info.used, info.waiters), (2, 2, 0));
    let h = info.hold_of(g.owner()).expect("listed");
    assert_eq!((h.permits, h.token), (2, g.token()));
    assert!(h.ttl > Duration::ZERO && h.ttl <= Duration::from_secs(5));
    assert!(info.token >= g.token());
    assert!(g.release().await.unwrap());
    assert!(sem.try_acquire(2).await.unwrap().is_some());
}

#[tokio::test]
async fn the_watchdog_keeps_permits_and_deleting_the_key_revokes_them() {
    let s = server();
    let conn = connector(&s).await;
    let sem = conn.semaphore("sem:renew", 1).with_options(opts(600));
    let g = sem.take(1).await.unwrap();
    let first = g.valid_until().unwrap();
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    assert!(g.is_held(), "{:?}", g.status());
    assert!(g.valid_until().unwrap() > first + Duration::from_millis(1_000));
    assert!(sem.try_acquire(1).await.unwrap().is_none());
    let mut c = raw(&s).await;
    let _: i64 = c.del("sem:renew").await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), g.lost())
        .await
        .expect("loss signalled");
    assert_eq!(reason, LossReason::Revoked);
    assert!(!g.release().await.unwrap(), "nothing left to release");
}

/// The server is frozen (SIGSTOP) for longer than the lease: the guard reports the loss
/// before the server, once continued, hands the permit to the waiting contender.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_loss_is_signalled_before_anyone_else_is_granted() {
    let s = server();
    let conn = connector(&s).await;
    let ttl = 1_000;
    let sem = conn.semaphore("sem:lost", 1).with_options(opts(ttl));
    let g = sem.take(1).await.unwrap();
    let acquired = Instant::now();
    let contender = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let g = sem.acquire_timeout(1, Duration::from_secs(20)).await;
            (g, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(sem.info().await.unwrap().waiters, 1);

    let frozen = freeze(&s);
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
    assert!(matches!(g.status(), LeaseStatus::Lost(_)) && g.check().is_err());
    // Frozen past the lease, then continued: the server lapses the hold and hands it on.
    tokio::time::sleep(Duration::from_millis(800)).await;
    drop(frozen);
    let (granted, granted_at) = contender.await.unwrap();
    let granted = granted.unwrap().expect("the contender gets the permit");
    assert!(
        lost_at < granted_at,
        "loss signalled {:?} before the other grant",
        granted_at - lost_at
    );
    assert!(granted.token() > g.token());
    assert!(granted.release().await.unwrap());
    assert!(!g.release().await.unwrap());
}

/// A grant whose reply is lost (the server freezes right after handing the permit over, the
/// client gives up waiting for the reply) is adopted through SEMAPHORE.INFO: one hold, the
/// token the server handed out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_was_lost_is_adopted_not_duplicated() {
    let s = server();
    let conn = connector(&s)
        .await
        .with_command_timeout(Duration::from_millis(1_500));
    let sem = conn
        .semaphore("sem:lost-reply", 1)
        .with_options(opts(8_000));
    let mut c = s.conn();
    let _: u64 = redis::cmd("SEMAPHORE.ACQUIRE")
        .arg("sem:lost-reply")
        .arg("h")
        .arg(1)
        .arg(10_000)
        .query(&mut c)
        .unwrap();
    let contender = {
        let sem = sem.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let g = sem.acquire_timeout(1, Duration::from_millis(600)).await;
            (g, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (released, ()): (i64, ()) = redis::pipe()
        .cmd("SEMAPHORE.RELEASE")
        .arg("sem:lost-reply")
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
    let info = sem.info().await.unwrap();
    let holders: Vec<_> = info
        .holders
        .iter()
        .map(|h| (h.owner.as_str(), h.token))
        .collect();
    assert_eq!(holders, [(g.owner(), g.token())], "{info:?}");
    assert!(g.release().await.unwrap());
    let exists: i64 = redis::cmd("EXISTS")
        .arg("sem:lost-reply")
        .query(&mut c)
        .unwrap();
    assert_eq!(exists, 0, "nothing left behind");
}

#[tokio::test]
async fn another_limit_or_other_permits_are_typed_errors() {
    let s = server();
    let conn = connector(&s).await;
    let sem = conn.semaphore("sem:typed", 3).with_options(opts(5_000));
    let g = sem.take(1).await.unwrap();
    let err = conn
        .semaphore("sem:typed", 4)
        .try_acquire(1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::LimitMismatch { limit: 3, asked: 4 }),
        "{err}"
    );
    // One hold per owner: the same permits answer the same hold, others are refused.
    let me = sem.clone().with_owner("me");
    let mine = me.try_acquire(2).await.unwrap().expect("free");
    let again = me.try_acquire(2).await.unwrap().expect("the same hold");
    assert_eq!(again.token(), mine.token());
    let err = me.try_acquire(1).await.unwrap_err();
    assert!(
        matches!(err, Error::PermitsMismatch { held: 2, asked: 1 }),
        "{err}"
    );
    // Checked before anything is sent.
    for (limit, permits) in [(3, 0), (3, 4), (0, 1)] {
        let err = conn
            .semaphore("sem:typed", limit)
            .try_acquire(permits)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidArgument(InvalidArgument::Permits { .. } | InvalidArgument::Limit(_))
            ),
            "{err}"
        );
    }
    let info = sem.info().await.unwrap();
    assert_eq!(info.used, 3, "{info:?}");
    // Both guards stand for the one hold: the first release gives it back.
    assert!(again.release().await.unwrap());
    assert!(!mine.release().await.unwrap());
    assert!(g.release().await.unwrap());
}

#[test]
fn blocking_api() {
    let s = server();
    let client = redis_lease_client::blocking::Client::open(&s.url()).unwrap();
    let sem = client.semaphore("sem:blocking", 2).with_options(opts(600));
    let a = sem.take(1).unwrap();
    let b = sem.try_acquire(1).unwrap().expect("the second permit");
    assert!(sem.try_acquire(1).unwrap().is_none());
    assert!(
        a.wait_lost(Duration::from_millis(1_500)).is_none(),
        "renewed"
    );
    assert!(a.is_held() && b.is_held());
    assert_eq!(sem.info().unwrap().used, 2);
    assert!(a.release().unwrap());
    drop(b);
    assert!(
        sem.acquire_timeout(2, Duration::from_secs(1))
            .unwrap()
            .is_some(),
        "drop released the permit"
    );
}
