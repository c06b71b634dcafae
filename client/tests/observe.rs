//! The queues of RWLOCK.INFO / SEMAPHORE.INFO and LEADER.INFO, read through the client.

mod common;

use std::time::Duration;

use common::*;
use redis_lease_client::{LockMode, RwLock, Semaphore};

/// A blocking request on its own connection, left waiting.
async fn park(s: &redis_lease_testkit::Server, args: &[&str]) -> tokio::task::JoinHandle<()> {
    let mut c = raw(s).await;
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    tokio::spawn(async move {
        let _: redis::RedisResult<Option<i64>> = cmd.query_async(&mut c).await;
    })
}

async fn waiters(s: &redis_lease_testkit::Server, n: u64) {
    let mut c = raw(s).await;
    let reached = eventually(Duration::from_secs(10), || {
        let mut c = c.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("lease")
                .query_async(&mut c)
                .await
                .unwrap();
            info.contains(&format!("lease_waiters:{n}\r"))
        }
    })
    .await;
    assert!(reached, "lease_waiters never reached {n}");
    let _: () = redis::cmd("PING").query_async(&mut c).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_semaphore_and_election_info_show_their_queues() {
    let s = server();
    let client = connector(&s).await;
    let lock = RwLock::new(&client, "k").with_options(opts(30_000));
    let held = lock.write().await.unwrap();
    let w = park(&s, &["RWLOCK.RLOCK", "k", "reader", "1000", "WAIT", "0"]).await;
    waiters(&s, 1).await;
    let info = lock.info().await.unwrap();
    assert_eq!(info.waiters, 1);
    assert_eq!(info.queue.len(), 1, "{info:?}");
    assert_eq!(info.queue[0].owner, "reader");
    assert_eq!(info.queue[0].mode, Some(LockMode::Read));
    assert_eq!(info.queue[0].left, None, "WAIT 0");
    held.release().await.unwrap();
    w.await.unwrap();

    let sem = Semaphore::new(&client, "s", 2);
    let _g = sem.take(2).await.unwrap();
    let w = park(
        &s,
        &["SEMAPHORE.ACQUIRE", "s", "x", "2", "1000", "WAIT", "9000"],
    )
    .await;
    waiters(&s, 1).await;
    let info = sem.info().await.unwrap();
    assert_eq!(info.queue.len(), 1, "{info:?}");
    assert_eq!(info.queue[0].permits, Some(1));
    assert!(info.queue[0].left.unwrap() <= Duration::from_secs(9));

    let mut c = raw(&s).await;
    let term: i64 = redis::cmd("LEADER.CAMPAIGN")
        .arg("e")
        .arg("boss")
        .arg(30_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let e = park(
        &s,
        &["LEADER.CAMPAIGN", "e", "next", "1000", "WAIT", "9000"],
    )
    .await;
    waiters(&s, 2).await;
    let info = client.election_info("e").await.unwrap();
    let leader = info.leader.expect("a leader");
    assert_eq!(
        (leader.candidate.as_str(), leader.term),
        ("boss", term as u64)
    );
    assert_eq!(info.queue.len(), 1);
    assert_eq!(info.queue[0].owner, "next");
    assert_eq!(info.waiters, 1);
    assert!(client
        .election_info("nobody")
        .await
        .unwrap()
        .leader
        .is_none());
    w.abort();
    e.abort();
}
