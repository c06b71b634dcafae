//! The client at its edges (issues 21 and 27): guards dropped outside any runtime, a blocking
//! client inside one, refused connections, a server without the module, ttls the server or the
//! connection cannot honour, replicas that never acknowledge, and the warnings and callbacks a
//! loss raises.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis_lease_testkit::Server;

fn exists(s: &Server, key: &str) -> bool {
    let mut c = s.conn();
    redis::cmd("EXISTS").arg(key).query::<i64>(&mut c).unwrap() == 1
}

/// Polls `f` (blocking) every 20 ms until it is true or `limit` passes.
fn eventually_sync(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn an_async_guard_dropped_outside_any_runtime_is_released() {
    let s = server();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (lock_guard, sem_guard) = rt.block_on(async {
        let client = connector(&s).await;
        let lock = client.rwlock("edge:drop").with_options(opts(30_000));
        let sem = client
            .semaphore("edge:dropsem", 2)
            .with_options(opts(30_000));
        (
            lock.write().await.unwrap(),
            sem.try_acquire(1).await.unwrap().unwrap(),
        )
    });
    assert!(exists(&s, "edge:drop") && exists(&s, "edge:dropsem"));
    // Dropped on a plain thread, with the client's runtime still running.
    std::thread::spawn(move || {
        drop(lock_guard);
        drop(sem_guard);
    })
    .join()
    .unwrap();
    assert!(
        eventually_sync(Duration::from_secs(5), || !exists(&s, "edge:drop")
            && !exists(&s, "edge:dropsem")),
        "the guards were not released (they would lapse after 30 s)"
    );
}
