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

#[test]
fn the_blocking_client_inside_a_runtime_answers_an_error_instead_of_panicking() {
    let s = server();
    let url = s.url();
    // Made on a plain thread, as it should be...
    let client = std::thread::spawn(move || redis_lease_client::blocking::Client::open(&url))
        .join()
        .unwrap()
        .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // ...then used (and dropped) inside an async context.
    rt.block_on(async move {
        let lock = client.rwlock("edge:blocking");
        let err = lock.try_write().unwrap_err();
        assert!(
            matches!(err, redis_lease_client::Error::InsideAsyncRuntime),
            "{err:?}"
        );
        assert!(err.to_string().contains("spawn_blocking"), "{err}");
        let url = "redis://127.0.0.1:1/";
        assert!(matches!(
            redis_lease_client::blocking::Client::open(url),
            Err(redis_lease_client::Error::InsideAsyncRuntime)
        ));
        drop(lock);
        drop(client); // dropping its runtime here must not panic either
    });
    assert!(!exists(&s, "edge:blocking"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_lost_is_called_once_on_a_loss_and_never_after_a_release() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    let s = server();
    let client = connector(&s).await;
    let lock = client.rwlock("edge:onlost").with_options(opts(600));
    let calls = Arc::new(AtomicU32::new(0));
    let (tx, rx) = tokio::sync::oneshot::channel();
    let g = lock.write().await.unwrap();
    let c = calls.clone();
    g.on_lost(move |reason| {
        c.fetch_add(1, Ordering::SeqCst);
        let _ = tx.send(reason);
    });
    // Another holder's view of the world: the key is deleted, the next renewal finds nothing.
    let mut raw = raw(&s).await;
    let _: () = redis::cmd("DEL")
        .arg("edge:onlost")
        .query_async(&mut raw)
        .await
        .unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(3), rx)
        .await
        .expect("on_lost called within the ttl")
        .unwrap();
    assert_eq!(reason, redis_lease_client::LossReason::Revoked);
    drop(g);
    // Registered on a guard that is then released: never called.
    let sem = client
        .semaphore("edge:onlostsem", 1)
        .with_options(opts(600));
    let g = sem.try_acquire(1).await.unwrap().unwrap();
    let c = calls.clone();
    g.on_lost(move |_| {
        c.fetch_add(100, Ordering::SeqCst);
    });
    assert!(g.release().await.unwrap());
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// Works with any kind of hold: the public guard trait.
async fn token_and_key(g: &impl redis_lease_client::Guard) -> (u64, String) {
    g.check().unwrap();
    (g.token(), g.key().to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_guard_is_a_guard() {
    use redis_lease_client::{Guard, Wait};
    let s = server();
    let client = connector(&s).await;
    let lg = client.rwlock("edge:g1").write().await.unwrap();
    let sg = client
        .semaphore("edge:g2", 2)
        .acquire(2, Wait::No)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(token_and_key(&lg).await.1, "edge:g1");
    assert_eq!(token_and_key(&sg).await.1, "edge:g2");
    assert!(Guard::release(lg).await.unwrap());
    assert!(Guard::release(sg).await.unwrap());
}

#[test]
fn a_loss_and_a_failed_renewal_are_logged_as_warnings() {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    // Global: a scoped subscriber misses events whose callsite another test's thread hit first.
    static BUF: std::sync::OnceLock<Buf> = std::sync::OnceLock::new();
    let buf = BUF
        .get_or_init(|| {
            let buf = Buf::default();
            let sink = buf.clone();
            tracing_subscriber::fmt()
                .with_writer(move || sink.clone())
                .with_max_level(tracing::Level::WARN)
                .init();
            buf
        })
        .clone();
    let mut s = server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    {
        rt.block_on(async {
            let client = connector(&s).await;
            let g = client
                .rwlock("edge:warn")
                .with_options(opts(600))
                .write()
                .await
                .unwrap();
            s.kill9();
            let reason = tokio::time::timeout(Duration::from_secs(5), g.lost())
                .await
                .expect("lost");
            assert_eq!(reason, redis_lease_client::LossReason::Expired);
            // The watchdog logs the loss when its last renewal attempt gives up.
            let logged = || String::from_utf8_lossy(&buf.0.lock().unwrap()).contains("was lost");
            let t = Instant::now();
            while !logged() && t.elapsed() < Duration::from_secs(5) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    }
    let text = String::from_utf8_lossy(&buf.0.lock().unwrap()).into_owned();
    assert!(
        text.contains("WARN") && text.contains("the renewal of the lease on edge:warn failed"),
        "{text}"
    );
    assert!(text.contains("the lease on edge:warn was lost"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_fails_a_non_waiting_call_fast_and_names_the_address() {
    let mut s = server();
    let client = connector(&s).await;
    let lock = client.rwlock("edge:refused");
    let sem = client.semaphore("edge:refused-sem", 2);
    let addr = format!("127.0.0.1:{}", s.port);
    s.kill9();
    for _ in 0..2 {
        let t = Instant::now();
        let err = lock.try_write().await.unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        let text = err.to_string();
        assert!(
            text.contains(&addr) && text.to_lowercase().contains("refused"),
            "{text}"
        );
        let t = Instant::now();
        let err = sem.try_acquire(1).await.unwrap_err();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(err.to_string().contains(&addr), "{err}");
    }
    // Opening a client on a refused port names it too.
    let err = redis_lease_client::Client::open(&format!("redis://{addr}/"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains(&addr), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_the_module_is_named_as_such() {
    let s = Server::with(redis_lease_testkit::Options {
        no_module: true,
        ..Default::default()
    });
    let client = connector(&s).await;
    let err = client.rwlock("edge:nomod").try_write().await.unwrap_err();
    assert!(
        matches!(err, redis_lease_client::Error::ModuleNotLoaded(_)),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("module is not loaded") && text.contains("MODULE LOAD"),
        "{text}"
    );
    let err = client
        .semaphore("edge:nomod", 1)
        .try_acquire(1)
        .await
        .unwrap_err();
    assert!(matches!(err, redis_lease_client::Error::ModuleNotLoaded(_)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_above_the_servers_max_ttl_is_refused_with_its_unit() {
    let s = Server::with(redis_lease_testkit::Options::default().module_arg("max-ttl", "5000"));
    let client = connector(&s).await;
    let err = client
        .rwlock("edge:maxttl")
        .with_ttl(Duration::from_secs(60))
        .unwrap()
        .try_write()
        .await
        .unwrap_err();
    match &err {
        redis_lease_client::Error::TtlRefused { max, .. } => {
            assert_eq!(*max, Duration::from_secs(5))
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("5000 ms"), "{err}");
    assert!(!exists(&s, "edge:maxttl"));
}

#[test]
fn an_election_no_replica_acknowledges_says_why_it_is_not_leader() {
    let s = server();
    let url = s.url();
    let c = redis_lease_client::blocking::Client::open(&url).unwrap();
    let opts = redis_lease_client::ElectionOptions {
        replicas: 1,
        replica_timeout: Duration::from_millis(200),
        ..Default::default()
    };
    let e = c.elector("edge:elect-repl").with_options(opts).start();
    let err = e.wait_leader(Some(Duration::from_secs(2))).unwrap_err();
    assert!(
        matches!(
            err,
            redis_lease_client::Error::NotReplicated {
                acked: 0,
                wanted: 1
            }
        ),
        "{err:?}"
    );
    assert_eq!(e.leadership().unreplicated, Some((0, 1)));
    assert!(!e.is_leader());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreplicated_acquisition_ends_by_the_callers_deadline() {
    let s = server();
    let client = connector(&s).await;
    let lock = client
        .rwlock("edge:deadline")
        .with_options(redis_lease_client::LockOptions {
            replicas: 1,
            replica_timeout: Duration::from_secs(1),
            ..opts(5_000)
        });
    for wait in [Duration::from_millis(1_500), Duration::from_millis(400)] {
        let t = Instant::now();
        let err = lock.write_timeout(wait).await.unwrap_err();
        let took = t.elapsed();
        assert!(
            matches!(err, redis_lease_client::Error::NotReplicated { .. }),
            "{err:?}"
        );
        // Some slack for a loaded machine (it ended 516 ms past it before the fix; 101 ms
        // was seen with other suites running beside it).
        assert!(
            took <= wait + Duration::from_millis(300),
            "NotReplicated {:?} past the deadline",
            took.saturating_sub(wait)
        );
    }
    assert!(!exists(&s, "edge:deadline"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_too_short_to_renew_is_refused() {
    let s = server();
    let client = connector(&s).await;
    assert!(client.round_trip().is_some());
    let lock = client
        .rwlock("edge:short")
        .with_ttl(Duration::from_millis(5))
        .unwrap();
    let err = lock.try_write().await.unwrap_err();
    assert!(
        matches!(
            err,
            redis_lease_client::Error::InvalidArgument(
                redis_lease_client::InvalidArgument::TtlTooShort { .. }
            )
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("too short to renew"), "{err}");
    assert!(!exists(&s, "edge:short"));
    let sem = client
        .semaphore("edge:short", 2)
        .with_ttl(Duration::from_millis(5))
        .unwrap();
    assert!(sem.try_acquire(1).await.is_err());
    let e = client
        .elector("edge:short-e")
        .with_ttl(Duration::from_millis(5))
        .unwrap()
        .start();
    let err = tokio::time::timeout(Duration::from_secs(2), e.wait_leader())
        .await
        .expect("the campaign stops at once")
        .unwrap_err();
    assert!(err.to_string().contains("too short to renew"), "{err}");
    // A short but workable ttl is fine.
    let g = client
        .rwlock("edge:short")
        .with_ttl(Duration::from_millis(100))
        .unwrap()
        .try_write()
        .await
        .unwrap()
        .expect("free");
    assert!(g.release().await.unwrap());
}
