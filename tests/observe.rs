//! Seeing every lock: the `queue` of RWLOCK.INFO / SEMAPHORE.INFO, LEADER.INFO, the wait and
//! hold histograms of `INFO lease`, and the lapse log line of `lease.log-lapses`.

use std::collections::HashMap;
use std::thread::sleep;
use std::time::Duration;

use redis_lease_testkit::crowd::Crowd;
use redis_lease_testkit::prelude::*;

const LONG: i64 = 60_000;

fn fields(v: &Value) -> HashMap<String, Value> {
    pairs(v).into_iter().collect()
}

/// The `queue` of an INFO reply, each waiter's map by field name.
fn queue(v: &Value) -> Vec<HashMap<String, Value>> {
    array(&fields(v)["queue"]).iter().map(fields).collect()
}

/// `name:1=a,10=b,...` from INFO lease, as (label, count) pairs.
fn buckets(c: &mut Connection, name: &str) -> Vec<(String, i64)> {
    let raw = info_field(c, "lease", name).unwrap_or_else(|| panic!("no {name} in INFO"));
    raw.split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.to_string(), v.parse().expect("count"))
        })
        .collect()
}

fn labels(b: &[(String, i64)]) -> Vec<&str> {
    b.iter().map(|(k, _)| k.as_str()).collect()
}

#[test]
fn rwlock_info_shows_the_queue_in_order_with_waited_and_left() {
    let s = Server::start();
    let mut c = conn(&s);
    token(&r!(c, "RWLOCK.WLOCK", "k", "holder", LONG));
    let w1 = spawn_wait(&s, &["RWLOCK.WLOCK", "k", "w1", "1000", "WAIT", "20000"]);
    await_lease_waiters(&mut c, 1);
    let w2 = spawn_wait(&s, &["RWLOCK.RLOCK", "k", "r2", "1000", "WAIT", "0"]);
    await_lease_waiters(&mut c, 2);
    sleep(Duration::from_millis(120));
    let v = r!(c, "RWLOCK.INFO", "k");
    assert_eq!(int(&fields(&v)["waiters"]), 2);
    let q = queue(&v);
    assert_eq!(q.len(), 2, "{v:?}");
    assert_eq!(text(&q[0]["owner"]), "w1");
    assert_eq!(text(&q[0]["mode"]), "write");
    assert_eq!(text(&q[1]["owner"]), "r2");
    assert_eq!(text(&q[1]["mode"]), "read");
    let waited = int(&q[0]["waited"]);
    assert!((100..20_000).contains(&waited), "waited {waited}");
    assert!(int(&q[0]["waited"]) >= int(&q[1]["waited"]), "{q:?}");
    let left = int(&q[0]["left"]);
    assert!(left > 0 && left <= 20_000 - 100, "left {left}");
    assert_eq!(int(&q[1]["left"]), -1, "WAIT 0 waits without a limit");
    // RESP3: the queue's entries are maps too.
    assert!(!is_err(&r!(c, "HELLO", "3")));
    let v3 = r!(c, "RWLOCK.INFO", "k");
    let Value::Map(m) = &v3 else { panic!("{v3:?}") };
    assert_eq!(m.len(), 5);
    assert!(queue(&v3).iter().all(|w| w.len() == 4));
    assert!(!is_err(&r!(c, "HELLO", "2")));
    // The first is served, then the queue shrinks; a missing key has an empty queue.
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "holder")), 1);
    assert!(w1.join().unwrap().unwrap().is_some());
    let q = queue(&r!(c, "RWLOCK.INFO", "k"));
    assert_eq!(q.len(), 1);
    assert_eq!(text(&q[0]["owner"]), "r2");
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "w1")), 1);
    assert!(w2.join().unwrap().unwrap().is_some());
    assert!(queue(&r!(c, "RWLOCK.INFO", "missing")).is_empty());
}

#[test]
fn a_waiter_that_left_is_not_shown_and_at_most_100_are() {
    let s = Server::start();
    let mut c = conn(&s);
    token(&r!(c, "RWLOCK.WLOCK", "k", "holder", LONG));
    let mut crowd = Crowd::connect(s.port, 105);
    crowd.send_each(|i| {
        [
            "RWLOCK.WLOCK",
            "k",
            &format!("o{i:03}"),
            "1000",
            "WAIT",
            "0",
        ]
        .map(String::from)
        .to_vec()
    });
    await_lease_waiters(&mut c, 105);
    let v = r!(c, "RWLOCK.INFO", "k");
    assert_eq!(int(&fields(&v)["waiters"]), 105);
    let q = queue(&v);
    assert_eq!(q.len(), 100);
    let owners: Vec<String> = q.iter().map(|w| text(&w["owner"])).collect();
    let expected: Vec<String> = (0..100).map(|i| format!("o{i:03}")).collect();
    assert_eq!(owners, expected, "queue order is arrival order");
    crowd.close();
    await_lease_waiters(&mut c, 0);
    let v = r!(c, "RWLOCK.INFO", "k");
    assert!(queue(&v).is_empty(), "departed waiters shown: {v:?}");
    assert_eq!(int(&fields(&v)["waiters"]), 0);
}

#[test]
fn semaphore_info_shows_permits_asked_for() {
    let s = Server::start();
    let mut c = conn(&s);
    token(&r!(c, "SEMAPHORE.ACQUIRE", "s", "a", 3, LONG, "PERMITS", 2));
    let w = spawn_wait(
        &s,
        &[
            "SEMAPHORE.ACQUIRE",
            "s",
            "b",
            "3",
            "1000",
            "PERMITS",
            "3",
            "WAIT",
            "5000",
        ],
    );
    await_lease_waiters(&mut c, 1);
    let v = r!(c, "SEMAPHORE.INFO", "s");
    let q = queue(&v);
    assert_eq!(q.len(), 1, "{v:?}");
    assert_eq!(text(&q[0]["owner"]), "b");
    assert_eq!(int(&q[0]["permits"]), 3);
    assert!((0..=5000).contains(&int(&q[0]["left"])));
    assert!(!q[0].contains_key("mode"));
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "s", "a")), 1);
    assert!(w.join().unwrap().unwrap().is_some());
    assert!(queue(&r!(c, "SEMAPHORE.INFO", "s")).is_empty());
}

#[test]
fn leader_info_shows_the_leader_and_the_waiting_candidates() {
    let s = Server::start();
    let mut c = conn(&s);
    let none = r!(c, "LEADER.INFO", "e");
    let f = fields(&none);
    assert!(is_nil(&f["leader"]), "{none:?}");
    assert!(array(&f["queue"]).is_empty());
    assert_eq!(int(&f["waiters"]), 0);

    let term = token(&r!(c, "LEADER.CAMPAIGN", "e", "boss", 10_000));
    let w = spawn_wait(
        &s,
        &["LEADER.CAMPAIGN", "e", "next", "1000", "WAIT", "8000"],
    );
    await_lease_waiters(&mut c, 1);
    let v = r!(c, "LEADER.INFO", "e");
    let f = fields(&v);
    let leader = fields(&f["leader"]);
    assert_eq!(text(&leader["candidate"]), "boss");
    assert_eq!(int(&leader["term"]), term);
    assert!((1..=10_000).contains(&int(&leader["ttl"])));
    assert_eq!(int(&leader["cap"]), -1, "no max hold");
    let q = queue(&v);
    assert_eq!(q.len(), 1);
    assert_eq!(text(&q[0]["candidate"]), "next");
    assert!((0..=8000).contains(&int(&q[0]["left"])));
    assert!(int(&q[0]["waited"]) >= 0);
    assert_eq!(int(&f["waiters"]), 1);
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "boss")), 1);
    let next = w.join().unwrap().unwrap().unwrap();
    let f = fields(&r!(c, "LEADER.INFO", "e"));
    assert_eq!(int(&fields(&f["leader"])["term"]), next);
    // A leader with a max hold shows the ms left until it.
    token(&r!(
        c,
        "LEADER.CAMPAIGN",
        "capped",
        "c",
        1000,
        "MAXHOLD",
        60_000
    ));
    let f = fields(&r!(c, "LEADER.INFO", "capped"));
    let cap = int(&fields(&f["leader"])["cap"]);
    assert!((50_000..=60_000).contains(&cap), "{cap}");
    assert!(array(&f["queue"]).is_empty());
    // Errors: arity, a key of another type.
    assert!(err(&r!(c, "LEADER.INFO")).contains("wrong number"));
    assert!(err(&r!(c, "LEADER.INFO", "e", "x")).contains("wrong number"));
    token(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG));
    assert!(err(&r!(c, "LEADER.INFO", "k")).starts_with("WRONGTYPE"));
    assert!(err(&r!(c, "RWLOCK.INFO", "e")).starts_with("WRONGTYPE"));
}

#[test]
fn info_lease_has_wait_and_hold_histograms() {
    let s = Server::start();
    let mut c = conn(&s);
    let b = buckets(&mut c, "lease_wait_bucket_ms");
    assert_eq!(labels(&b), ["1", "10", "100", "1000", "10000", "inf"]);
    assert!(b.iter().all(|(_, n)| *n == 0), "{b:?}");
    assert_eq!(info_int(&mut c, "lease", "lease_hold_count"), 0);

    // A wait granted after ~200 ms, one that times out after 50 ms, one that leaves.
    token(&r!(c, "RWLOCK.WLOCK", "k", "a", LONG));
    let granted = spawn_wait(&s, &["RWLOCK.WLOCK", "k", "b", "1000", "WAIT", "20000"]);
    await_lease_waiters(&mut c, 1);
    let mut w = conn(&s);
    assert!(is_nil(&r!(w, "RWLOCK.WLOCK", "k", "t", 1000, "WAIT", 50)));
    sleep(Duration::from_millis(250));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert!(granted.join().unwrap().unwrap().is_some());
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "b")), 1);
    let b = buckets(&mut c, "lease_wait_bucket_ms");
    // Cumulative: the 50 ms wait is at or below 100, the granted one (~250 ms) at or below 1000.
    let n: Vec<i64> = b.iter().map(|(_, n)| *n).collect();
    assert_eq!(n[..2], [0, 0], "{b:?}");
    assert_eq!(n[2], 1, "{b:?}");
    assert_eq!(n[3..], [2, 2, 2], "{b:?}");
    assert_eq!(info_int(&mut c, "lease", "lease_wait_count"), 2);
    let sum = info_int(&mut c, "lease", "lease_wait_sum_ms");
    assert!((50 + 250..5_000).contains(&sum), "sum {sum}");

    // Holds: a held ~250 ms, b briefly; a reentrant hold ends at its last release; a lapse
    // ends one too.
    let hb = buckets(&mut c, "lease_hold_bucket_ms");
    assert_eq!(hb.last().unwrap().1, 2, "{hb:?}");
    assert!(hb[3].1 == 2 && hb[1].1 <= 1, "{hb:?}");
    token(&r!(c, "RWLOCK.RLOCK", "r", "x", LONG));
    token(&r!(c, "RWLOCK.RLOCK", "r", "x", LONG));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "r", "x")), 1);
    assert_eq!(info_int(&mut c, "lease", "lease_hold_count"), 2);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "r", "x")), 1);
    assert_eq!(info_int(&mut c, "lease", "lease_hold_count"), 3);
    token(&r!(c, "LEADER.CAMPAIGN", "e", "l", 300));
    until(Duration::from_secs(10), "the lease lapses", || {
        info_int(&mut c, "lease", "lease_lapses") == 1
    });
    assert_eq!(info_int(&mut c, "lease", "lease_hold_count"), 4);
    let sum = info_int(&mut c, "lease", "lease_hold_sum_ms");
    assert!((250 + 300..10_000).contains(&sum), "hold sum {sum}");
    let hb = buckets(&mut c, "lease_hold_bucket_ms");
    assert_eq!(hb.last().unwrap().1, 4, "{hb:?}");
}

#[test]
fn log_lapses_writes_one_escaped_notice_line_per_lapse() {
    let s = Server::start();
    let mut c = conn(&s);
    assert_eq!(
        array(&r!(c, "CONFIG", "GET", "lease.log-lapses"))
            .iter()
            .map(text)
            .collect::<Vec<_>>(),
        ["lease.log-lapses", "no"]
    );
    token(&r!(c, "RWLOCK.WLOCK", "quiet", "o", 100));
    until(Duration::from_secs(10), "the first lapse", || {
        info_int(&mut c, "lease", "lease_lapses") == 1
    });
    assert!(!s.log().contains("lease: lapse"), "off: no notice line");

    assert_eq!(
        text(&r!(c, "CONFIG", "SET", "lease.log-lapses", "yes")),
        "OK"
    );
    token(&r!(
        c,
        "RWLOCK.WLOCK",
        "k\nfake line",
        &b"own\x00er\xe9"[..],
        200
    ));
    let w = spawn_wait(
        &s,
        &[
            "RWLOCK.WLOCK",
            "k\nfake line",
            "next",
            "1000",
            "WAIT",
            "5000",
        ],
    );
    token(&r!(c, "LEADER.CAMPAIGN", "e", "alone", 150));
    assert!(w.join().unwrap().unwrap().is_some());
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k\nfake line", "next")), 1);
    until(Duration::from_secs(10), "both lapse", || {
        info_int(&mut c, "lease", "lease_lapses") == 3
    });
    let log = s.log();
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("lease: lapse")).collect();
    assert_eq!(lines.len(), 2, "{lines:#?}");
    let locked = lines
        .iter()
        .find(|l| l.contains("key='k\\nfake line'"))
        .unwrap();
    assert!(locked.contains("owner='own\\x00er\\xe9'"), "{locked}");
    assert!(locked.contains("served=yes"), "{locked}");
    let held: u64 = locked
        .split("held_ms=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{locked}"));
    assert!((150..5_000).contains(&held), "{locked}");
    let elected = lines.iter().find(|l| l.contains("key='e'")).unwrap();
    assert!(elected.contains("owner='alone'") && elected.contains("served=no"));
    assert_log_printable(&s, "lapse lines");
    assert!(is_err(&r!(c, "CONFIG", "SET", "lease.log-lapses", "maybe")));
}
