//! Leader election and observation against a real redis-server with the module.

mod common;

use std::time::{Duration, Instant};

use common::*;
use redis_lease_client::{
    CampaignError, ElectionOptions, LeaderElector, LeaderObserver, LeaseTiming, RetryPolicy,
};

fn eopts(ttl_ms: u64) -> ElectionOptions {
    ElectionOptions {
        timing: LeaseTiming::new(Duration::from_millis(ttl_ms)).unwrap(),
        retry: RetryPolicy {
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(200),
            budget: Duration::from_secs(15),
        },
        campaign_wait: Duration::from_secs(5),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_then_handover_on_resign() {
    let s = server();
    let conn = connector(&s).await;
    let a = LeaderElector::new(&conn, "election:a")
        .with_candidate("a")
        .with_options(eopts(1_000))
        .start();
    let term_a = tokio::time::timeout(Duration::from_secs(5), a.wait_leader())
        .await
        .unwrap()
        .unwrap();
    let b = LeaderElector::new(&conn, "election:a")
        .with_candidate("b")
        .with_options(eopts(1_000))
        .start();
    // b waits while a renews, through several ttls.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(a.is_leader());
    assert!(!b.is_leader());
    let cur = conn.current_leader("election:a").await.unwrap().unwrap();
    assert_eq!((cur.candidate.as_str(), cur.term), ("a", term_a));

    let t = Instant::now();
    assert!(a.resign().await.unwrap());
    let term_b = tokio::time::timeout(Duration::from_secs(5), b.wait_leader())
        .await
        .unwrap()
        .unwrap();
    assert!(
        t.elapsed() < Duration::from_millis(1_000),
        "handover took {:?}",
        t.elapsed()
    );
    assert!(term_b > term_a);
    assert!(b.resign().await.unwrap());
    assert!(conn.current_leader("election:a").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_sees_every_change_without_polling() {
    let s = server();
    let conn = connector(&s).await;
    let mut obs = LeaderObserver::start(&conn, "election:obs").await.unwrap();
    assert!(obs.current().is_none());

    let a = LeaderElector::new(&conn, "election:obs")
        .with_candidate("a")
        .with_options(eopts(1_000))
        .start();
    let seen = tokio::time::timeout(Duration::from_secs(5), obs.changed())
        .await
        .expect("change reported")
        .unwrap()
        .expect("a leads");
    assert_eq!(seen.candidate, "a");

    let b = LeaderElector::new(&conn, "election:obs")
        .with_candidate("b")
        .with_options(eopts(1_000))
        .start();
    tokio::time::sleep(Duration::from_millis(200)).await;
    a.resign().await.unwrap();
    let seen_b = tokio::time::timeout(Duration::from_secs(5), obs.changed())
        .await
        .expect("change reported")
        .unwrap()
        .expect("b leads");
    assert_eq!(seen_b.candidate, "b");
    assert!(seen_b.term > seen.term);

    // The leader's lease lapses (its campaign is stopped without resigning): seen too.
    let t = Instant::now();
    let b_term = b.wait_leader().await.unwrap();
    drop_without_resign(b);
    let gone = tokio::time::timeout(Duration::from_secs(5), obs.changed())
        .await
        .expect("lapse reported")
        .unwrap();
    assert!(gone.is_none(), "{gone:?} (b's term {b_term})");
    assert!(
        t.elapsed() < Duration::from_millis(2_500),
        "{:?}",
        t.elapsed()
    );
}

/// Stops an election's background task without the resign that dropping it would send
/// (what a crashed process looks like to the server).
fn drop_without_resign(e: redis_lease_client::Election) {
    // Dropping outside a runtime context cannot spawn the resign.
    std::thread::spawn(move || drop(e)).join().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_steps_down_when_the_server_stops_answering() {
    let s = server();
    let conn = connector(&s).await;
    let a = LeaderElector::new(&conn, "election:pause")
        .with_candidate("a")
        .with_options(eopts(1_000))
        .start();
    a.wait_leader().await.unwrap();
    let url = s.url();
    let sleeper = std::thread::spawn(move || {
        let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
        let _: redis::RedisResult<()> = redis::cmd("DEBUG").arg("SLEEP").arg(2).query(&mut c);
    });
    let t = Instant::now();
    tokio::time::timeout(Duration::from_secs(5), a.lost())
        .await
        .expect("stepped down");
    assert!(
        t.elapsed() <= Duration::from_millis(1_300),
        "{:?}",
        t.elapsed()
    );
    assert!(!a.is_leader());
    sleeper.join().unwrap();
    // Once the server answers again, a campaigns and wins again.
    tokio::time::timeout(Duration::from_secs(10), a.wait_leader())
        .await
        .expect("re-elected")
        .unwrap();
    a.resign().await.unwrap();
}

#[test]
fn blocking_election() {
    let s = server();
    let client = redis_lease_client::blocking::Client::open(&s.url()).unwrap();
    let a = client
        .elector("election:blocking")
        .with_candidate("a")
        .with_options(eopts(1_000))
        .start();
    let term = a
        .wait_leader(Some(Duration::from_secs(5)))
        .unwrap()
        .unwrap();
    assert_eq!(
        client
            .current_leader("election:blocking")
            .unwrap()
            .unwrap()
            .term,
        term
    );
    let mut obs = client
        .observe("election:blocking", Default::default())
        .unwrap();
    assert_eq!(obs.current().unwrap().candidate, "a");
    assert!(!a.wait_lost(Duration::from_millis(1_500)), "renewed");
    assert!(a.resign().unwrap());
    let change = obs.next_change(Duration::from_secs(5)).unwrap();
    assert_eq!(change, Some(None), "the observer saw the resignation");
    assert!(client
        .current_leader("election:blocking")
        .unwrap()
        .is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observer_resubscribes_after_a_server_restart() {
    let mut s = server();
    let conn = connector(&s).await;
    let mut obs = LeaderObserver::start(&conn, "election:restart")
        .await
        .unwrap();
    s.kill9();
    let s = tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(300));
        // The restarted server has the default notification settings again: the observer
        // sets them again when it subscribes again.
        s.restart(None);
        s
    })
    .await
    .unwrap();
    let mut c = raw(&s).await;
    // Give the observer time to subscribe again (its backoff is at most 1 s).
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let _: u64 = redis::cmd("LEADER.CAMPAIGN")
        .arg("election:restart")
        .arg("z")
        .arg(5_000)
        .query_async(&mut c)
        .await
        .unwrap();
    let seen = tokio::time::timeout(Duration::from_secs(5), obs.changed())
        .await
        .expect("change after the restart reported")
        .unwrap()
        .expect("z leads");
    assert_eq!(seen.candidate, "z");
}

#[tokio::test]
async fn a_campaign_refused_by_the_server_stops_with_a_typed_error() {
    let s = server();
    let conn = connector(&s).await;
    let mut c = raw(&s).await;
    let _: () = redis::cmd("SET")
        .arg("election:string")
        .arg("not an election")
        .query_async(&mut c)
        .await
        .unwrap();
    let e = conn
        .elector("election:string")
        .with_options(eopts(1_000))
        .start();
    let err = tokio::time::timeout(Duration::from_secs(5), e.wait_leader())
        .await
        .expect("answered in time")
        .unwrap_err();
    match &err {
        redis_lease_client::Error::CampaignStopped(CampaignError::Refused { code, .. }) => {
            assert_eq!(code, "WRONGTYPE")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        e.leadership().error,
        Some(CampaignError::Refused { .. })
    ));
    assert!(!e.is_leader());
}
