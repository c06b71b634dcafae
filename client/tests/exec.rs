//! `exec` (LEASE.EXEC) on lock guards, semaphore guards and elections, against a real
//! redis-server with the module: fenced writes checked by the server itself.

mod common;

use std::time::Duration;

use common::replica::{replica_of, wait_replicas};
use common::*;
use redis::AsyncCommands;
use redis_lease_client::{Client, Error, LeaseStatus, LockOptions, LossReason};
use redis_lease_testkit::{Options, Server};

fn set(key: &str, v: &str) -> redis::Cmd {
    redis::cmd("SET").arg(key).arg(v).to_owned()
}

async fn get(s: &Server, key: &str) -> Option<String> {
    raw(s).await.get(key).await.unwrap()
}

#[tokio::test]
async fn exec_runs_the_command_while_held_and_answers_its_reply() {
    let s = server();
    let conn = connector(&s).await;
    let g = conn
        .rwlock("{o:1}")
        .with_options(opts(5_000))
        .write()
        .await
        .unwrap();
    let ok: String = g.exec(&set("{o:1}:data", "v1")).await.unwrap();
    assert_eq!(ok, "OK");
    let v: Option<String> = g.exec(redis::cmd("GET").arg("{o:1}:data")).await.unwrap();
    assert_eq!(v.as_deref(), Some("v1"));
    assert!(g.release().await.unwrap());

    let p = conn
        .semaphore("{pool}", 2)
        .with_options(opts(5_000))
        .take(1)
        .await
        .unwrap();
    let n: i64 = p.exec(redis::cmd("INCR").arg("{pool}:n")).await.unwrap();
    assert_eq!(n, 1);
    assert!(p.release().await.unwrap());

    // Another candidate leads: this one has no term to send.
    let mut c = raw(&s).await;
    let _: u64 = redis::cmd("LEADER.CAMPAIGN")
        .arg("{job}")
        .arg("other")
        .arg(10_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let e = conn
        .elector("{job}")
        .with_ttl(Duration::from_secs(5))
        .unwrap()
        .start();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let err = e
        .exec::<i64>(redis::cmd("INCR").arg("{job}:runs"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced(_)), "{err}");
    let _: i64 = redis::cmd("LEADER.RESIGN")
        .arg("{job}")
        .arg("other")
        .query_async(&mut c)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), e.wait_leader())
        .await
        .expect("elected")
        .unwrap();
    let runs: i64 = e.exec(redis::cmd("INCR").arg("{job}:runs")).await.unwrap();
    assert_eq!(runs, 1);
    let _: i64 = c.del("{job}").await.unwrap();
    let err = e
        .exec::<i64>(redis::cmd("INCR").arg("{job}:runs"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced(_)), "{err}");
    assert_eq!(get(&s, "{job}:runs").await.as_deref(), Some("1"));
    let _ = e.resign().await;
}

/// The hold is gone on the server (the key was deleted) while the guard still thinks it is
/// held: the server refuses, nothing runs, and the guard reports the loss at once.
#[tokio::test]
async fn fenced_runs_nothing_and_marks_the_lease_lost() {
    let s = server();
    let conn = connector(&s).await;
    let g = conn
        .semaphore("{o:2}", 1)
        .with_options(opts(10_000))
        .take(1)
        .await
        .unwrap();
    let _: String = g.exec(&set("{o:2}:data", "mine")).await.unwrap();
    let mut c = raw(&s).await;
    let _: i64 = c.del("{o:2}").await.unwrap();
    assert!(g.is_held(), "the watchdog has not renewed since");
    let err = g
        .exec::<String>(&set("{o:2}:data", "late"))
        .await
        .unwrap_err();
    match &err {
        Error::Fenced(text) => assert!(text.starts_with("FENCED"), "{text}"),
        other => panic!("{other}"),
    }
    assert_eq!(g.status(), LeaseStatus::Lost(LossReason::Revoked));
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(1), g.lost())
            .await
            .expect("signalled"),
        LossReason::Revoked
    );
    assert_eq!(get(&s, "{o:2}:data").await.as_deref(), Some("mine"));
}

/// A leader told FENCED steps down at once, not at its next renewal (a third of the 30 s ttl
/// away), and campaigns again for a new term.
#[tokio::test]
async fn a_fenced_leader_steps_down_at_once() {
    let s = server();
    let conn = connector(&s).await;
    let election = conn
        .elector("{o:9}")
        .with_candidate("a")
        .with_ttl(Duration::from_secs(30))
        .unwrap()
        .start();
    let term = tokio::time::timeout(Duration::from_secs(10), election.wait_leader())
        .await
        .expect("elected")
        .unwrap();
    let mut watch = election.watch();
    watch.borrow_and_update();
    let mut c = raw(&s).await;
    let _: i64 = c.del("{o:9}").await.unwrap();
    let err = election
        .exec::<String>(&set("{o:9}:data", "late"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Fenced(_)), "{err}");
    tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            watch.changed().await.unwrap();
            let l = watch.borrow_and_update().clone();
            if !l.is_leader || l.term != Some(term) {
                return;
            }
        }
    })
    .await
    .expect("stepped down from the fenced term within 3 s");
    assert_eq!(get(&s, "{o:9}:data").await, None);
    // It campaigns again: a new term, above the fenced one.
    let next = tokio::time::timeout(Duration::from_secs(10), election.wait_leader())
        .await
        .expect("elected again")
        .unwrap();
    assert!(next > term, "{next} after {term}");
}

#[tokio::test]
async fn a_read_hold_does_not_fence_writes_and_keeps_its_lease() {
    let s = server();
    let conn = connector(&s).await;
    let g = conn
        .rwlock("{o:3}")
        .with_options(opts(5_000))
        .read()
        .await
        .unwrap();
    let err = g.exec::<String>(&set("{o:3}:data", "x")).await.unwrap_err();
    assert!(matches!(err, Error::Fenced(_)), "{err}");
    assert!(g.is_held(), "a read guard's lease is not lost by it");
    assert_eq!(get(&s, "{o:3}:data").await, None);
    assert!(g.release().await.unwrap());
}

/// A holder that stopped renewing (as if frozen: its user may no longer RENEW, so its lease
/// lapses on the server after the ttl) writes after the next holder did: the server refuses
/// the stale write and the data stays the newer holder's. For a write lock and a semaphore.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_fenced_after_the_next_holder_wrote() {
    let s = server();
    let mut admin = s.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("stale")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .arg("-rwlock.renew")
        .arg("-semaphore.renew")
        .query(&mut admin)
        .unwrap();
    let stale = Client::open(&format!("redis://stale:pw@127.0.0.1:{}/", s.port))
        .await
        .unwrap();
    let fresh = connector(&s).await;
    let ttl = 600;
    for kind in ["lock", "semaphore"] {
        let key = format!("{{stale:{kind}}}");
        let data = format!("{key}:data");
        let (old, new): (Box<dyn Holder>, Box<dyn Holder>) = if kind == "lock" {
            let old = stale
                .rwlock(&key)
                .with_options(opts(ttl))
                .write()
                .await
                .unwrap();
            let lock = fresh.rwlock(&key).with_options(opts(5_000));
            let new = lock
                .write_timeout(Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap();
            (Box::new(old), Box::new(new))
        } else {
            let old = stale.semaphore(&key, 1).with_options(opts(ttl));
            let old = old.take(1).await.unwrap();
            let sem = fresh.semaphore(&key, 1).with_options(opts(5_000));
            let new = sem
                .acquire_timeout(1, Duration::from_secs(5))
                .await
                .unwrap()
                .unwrap();
            (Box::new(old), Box::new(new))
        };
        // The new holder was granted only once the stale one's lease lapsed.
        assert!(new.token() > old.token());
        assert!(
            !old.held(),
            "the stale guard knows by now (its renewal was refused)"
        );
        assert_eq!(new.write(&data, "new").await.unwrap(), "OK");
        let err = old.write(&data, "stale").await.unwrap_err();
        assert!(matches!(err, Error::Fenced(_)), "{kind}: {err}");
        assert_eq!(get(&s, &data).await.as_deref(), Some("new"), "{kind}");
    }
}

/// What the stale-holder test needs of either guard.
trait Holder {
    fn token(&self) -> u64;
    fn held(&self) -> bool;
    fn write<'a>(
        &'a self,
        key: &'a str,
        v: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, Error>> + 'a>>;
}

impl Holder for redis_lease_client::LockGuard {
    fn token(&self) -> u64 {
        self.token()
    }
    fn held(&self) -> bool {
        self.is_held()
    }
    fn write<'a>(
        &'a self,
        key: &'a str,
        v: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, Error>> + 'a>> {
        Box::pin(async move { self.exec(&set(key, v)).await })
    }
}

impl Holder for redis_lease_client::SemaphoreGuard {
    fn token(&self) -> u64 {
        self.token()
    }
    fn held(&self) -> bool {
        self.is_held()
    }
    fn write<'a>(
        &'a self,
        key: &'a str,
        v: &'a str,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, Error>> + 'a>> {
        Box::pin(async move { self.exec(&set(key, v)).await })
    }
}

/// The inner command runs as the calling user: an ACL denial is the server's error (not
/// FENCED), nothing runs, the lease stays; blocking commands and the module's own are refused.
#[tokio::test]
async fn acl_denial_and_refused_commands_are_errors_not_fenced() {
    let s = server();
    let mut admin = s.conn();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("noset")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .arg("-set")
        .query(&mut admin)
        .unwrap();
    let conn = Client::open(&format!("redis://noset:pw@127.0.0.1:{}/", s.port))
        .await
        .unwrap();
    let g = conn
        .rwlock("{o:4}")
        .with_options(opts(5_000))
        .write()
        .await
        .unwrap();
    let err = g.exec::<String>(&set("{o:4}:data", "x")).await.unwrap_err();
    match &err {
        Error::Redis(e) => assert!(e.to_string().contains("acl"), "{e}"),
        other => panic!("an ACL denial is the server's error: {other}"),
    }
    let n: i64 = g.exec(redis::cmd("INCR").arg("{o:4}:n")).await.unwrap();
    assert_eq!(n, 1, "what the user may run runs");
    for refused in [
        redis::cmd("BLPOP").arg("{o:4}:q").arg(0).to_owned(),
        redis::cmd("RWLOCK.UNLOCK")
            .arg("{o:4}")
            .arg(g.owner())
            .to_owned(),
        redis::cmd("MULTI"),
        redis::cmd("EVAL").arg("return 1").arg(0).to_owned(),
    ] {
        let err = g.exec::<redis::Value>(&refused).await.unwrap_err();
        assert!(matches!(err, Error::Redis(_)), "{err}");
    }
    assert!(g.is_held());
    assert_eq!(get(&s, "{o:4}:data").await, None);
    assert!(
        g.release().await.unwrap(),
        "the module's UNLOCK did not run inside"
    );
}

/// The inner command's effect reaches a replica, and survives a restart from the AOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inner_commands_effect_is_replicated_and_persisted() {
    let mut m = Server::with(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let r = replica_of(&m);
    let conn = connector(&m).await;
    let g = conn
        .rwlock("{o:5}")
        .with_options(LockOptions {
            replicas: 1,
            ..opts(5_000)
        })
        .write()
        .await
        .unwrap();
    let _: String = g.exec(&set("{o:5}:data", "replicated")).await.unwrap();
    let _: i64 = g
        .exec(redis::cmd("RPUSH").arg("{o:5}:log").arg("a").arg("b"))
        .await
        .unwrap();
    wait_replicas(&m, 1);
    assert_eq!(get(&r, "{o:5}:data").await.as_deref(), Some("replicated"));
    let log: Vec<String> = raw(&r).await.lrange("{o:5}:log", 0, -1).await.unwrap();
    assert_eq!(log, ["a", "b"]);
    drop(g);
    drop(conn);
    drop(r);
    m.kill9();
    m.restart(None);
    assert_eq!(get(&m, "{o:5}:data").await.as_deref(), Some("replicated"));
}
