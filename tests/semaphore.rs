//! SEMAPHORE.*: at most `limit` permits held at once, each holder with its own lease and token,
//! waiters served strictly in arrival order, through restarts, replication and the wire.
//! docs/COMMANDS.md, SEMAPHORE.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

const LONG: i64 = 60_000;

/// SEMAPHORE.INFO, decoded: (limit, used, waiters, token, holders by owner: (permits, token)).
#[derive(Debug, PartialEq, Eq)]
struct SemInfo {
    limit: i64,
    used: i64,
    waiters: i64,
    token: i64,
    holders: HashMap<String, (i64, i64)>,
}

fn info(c: &mut Connection, key: &str) -> SemInfo {
    let v = r!(c, "SEMAPHORE.INFO", key);
    let m: HashMap<String, Value> = pairs(&v).into_iter().collect();
    let holders = array(&m["holders"])
        .iter()
        .map(|h| {
            let h: HashMap<String, Value> = pairs(h).into_iter().collect();
            (text(&h["owner"]), (int(&h["permits"]), int(&h["token"])))
        })
        .collect();
    SemInfo {
        limit: int(&m["limit"]),
        used: int(&m["used"]),
        waiters: int(&m["waiters"]),
        token: int(&m["token"]),
        holders,
    }
}

fn acquire(c: &mut Connection, key: &str, owner: &str, limit: i64, permits: i64) -> Value {
    r!(
        c,
        "SEMAPHORE.ACQUIRE",
        key,
        owner,
        limit,
        LONG,
        "PERMITS",
        permits
    )
}

#[test]
fn at_most_limit_permits_are_held_and_each_holder_has_its_own_token() {
    let s = debug_server();
    let mut c = conn(&s);
    let a = token(&acquire(&mut c, "s", "a", 5, 2));
    let b = token(&acquire(&mut c, "s", "b", 5, 3));
    assert!(b > a);
    assert!(is_nil(&acquire(&mut c, "s", "c", 5, 1)), "5 of 5 are held");
    let i = info(&mut c, "s");
    assert_eq!((i.limit, i.used, i.waiters), (5, 5, 0));
    assert_eq!(i.holders["a"], (2, a));
    assert_eq!(i.token, b);
    // A retry with the same permits is exact: the same token, a lease at least as long.
    assert_eq!(token(&acquire(&mut c, "s", "a", 5, 2)), a);
    assert_eq!(info(&mut c, "s").used, 5);
    // Other permits, another limit, or more permits than the limit: errors, nothing changes.
    // Each refusal has its own code (clients match it, not the wording).
    let e = err(&acquire(&mut c, "s", "a", 5, 1));
    assert!(
        e.starts_with("PERMITS ") && e.contains("holds 2 permits"),
        "{e}"
    );
    let e = err(&acquire(&mut c, "s", "d", 4, 1));
    assert!(e.starts_with("LIMIT ") && e.contains("limit is 5"), "{e}");
    assert!(err(&acquire(&mut c, "s", "d", 5, 6)).contains("PERMITS"));
    for bad in [
        &["s", "d", "0", "1000"][..],
        &["s", "d", "x", "1000"],
        &["s", "d", "2147483648", "1000"],
    ] {
        let mut args = vec![b"SEMAPHORE.ACQUIRE".to_vec()];
        args.extend(bad.iter().map(|a| a.as_bytes().to_vec()));
        assert!(
            err(&exec_args(&mut c, &args).unwrap()).contains("limit"),
            "{bad:?}"
        );
    }
    assert_eq!(info(&mut c, "s").holders.len(), 2);
    // Release gives back all of an owner's permits; renew keeps its token.
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "s", "a")), 1);
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "s", "a")), 0);
    assert_eq!(token(&r!(c, "SEMAPHORE.RENEW", "s", "b", 5_000)), b);
    assert!(is_nil(&r!(c, "SEMAPHORE.RENEW", "s", "a", 5_000)));
    let c2 = token(&acquire(&mut c, "s", "c", 5, 2));
    assert!(c2 > b);
    assert_eq!(info(&mut c, "s").used, 5);
    // The last release deletes the key; it takes a new limit when made again.
    r!(c, "SEMAPHORE.RELEASE", "s", "b");
    r!(c, "SEMAPHORE.RELEASE", "s", "c");
    assert_eq!(exists(&mut c, "s"), 0);
    assert!(token(&acquire(&mut c, "s", "e", 9, 9)) > c2);
    assert_eq!(text(&r!(c, "TYPE", "s")), "lease-sem");
    assert!(err(&r!(c, "RWLOCK.WLOCK", "s", "x", 1000)).starts_with("WRONGTYPE"));
}

#[test]
fn waiters_are_served_in_arrival_order_and_a_large_request_is_not_overtaken() {
    let s = debug_server();
    let mut c = conn(&s);
    token(&acquire(&mut c, "s", "h1", 4, 2));
    token(&acquire(&mut c, "s", "h2", 4, 2));
    // big (4 permits) arrives first, then small (1): small must not overtake big.
    let big = spawn_wait(
        &s,
        &[
            "SEMAPHORE.ACQUIRE",
            "s",
            "big",
            "4",
            "60000",
            "PERMITS",
            "4",
            "WAIT",
            "10000",
        ],
    );
    until(Duration::from_secs(5), "big waits", || {
        info(&mut c, "s").waiters == 1
    });
    let small = spawn_wait(
        &s,
        &[
            "SEMAPHORE.ACQUIRE",
            "s",
            "small",
            "4",
            "60000",
            "WAIT",
            "10000",
        ],
    );
    until(Duration::from_secs(5), "small waits", || {
        info(&mut c, "s").waiters == 2
    });
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "s", "h1")), 1);
    // 2 permits are free: small would fit, but big is at the head.
    std::thread::sleep(Duration::from_millis(100));
    let i = info(&mut c, "s");
    assert_eq!((i.used, i.waiters), (2, 2), "{i:?}");
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "s", "h2")), 1);
    let tb = big.join().unwrap().unwrap().expect("big granted");
    assert_eq!(
        info(&mut c, "s").holders.keys().collect::<Vec<_>>(),
        ["big"]
    );
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "s", "big")), 1);
    let ts = small.join().unwrap().unwrap().expect("small granted");
    assert!(ts > tb);
}

#[test]
fn a_lapse_hands_the_permits_on() {
    let s = debug_server();
    let mut c = conn(&s);
    let a = token(&r!(c, "SEMAPHORE.ACQUIRE", "s", "a", 1, 300));
    let w = spawn_wait(
        &s,
        &["SEMAPHORE.ACQUIRE", "s", "b", "1", "60000", "WAIT", "5000"],
    );
    until(Duration::from_secs(5), "b waits", || {
        info(&mut c, "s").waiters == 1
    });
    let t0 = Instant::now();
    let b = w.join().unwrap().unwrap().expect("b granted at a's lapse");
    assert!(b > a);
    assert!(
        t0.elapsed() < Duration::from_millis(1_500),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(info(&mut c, "s").holders.keys().collect::<Vec<_>>(), ["b"]);
    assert!(is_nil(&r!(c, "SEMAPHORE.RENEW", "s", "a", 1000)));
}

#[test]
fn holders_survive_restarts_and_replicate() {
    let mut s = Server::with(
        debug_opts()
            .arg("appendonly", "yes")
            .arg("aof-use-rdb-preamble", "no"),
    );
    let replica = start_replica(&s);
    let mut c = conn(&s);
    let a = token(&acquire(&mut c, "s", "a", 3, 2));
    let b = token(&acquire(&mut c, "s", "b", 3, 1));
    sync(&s, &replica);
    let before = info(&mut c, "s");
    assert_eq!(info(&mut conn(&replica), "s"), before, "the replica's copy");
    // DUMP / RESTORE carries limit, holders and tokens.
    let dump = r!(c, "DUMP", "s");
    let Value::BulkString(payload) = dump else {
        panic!("DUMP: {dump:?}")
    };
    assert_eq!(text(&r!(c, "RESTORE", "copy", 0, payload.as_slice())), "OK");
    assert_eq!(info(&mut c, "copy").holders, before.holders);
    // An AOF rewrite (no RDB preamble), then kill -9 and a restart from it.
    r!(c, "BGREWRITEAOF");
    wait_persistence_idle(&mut c);
    s.kill9();
    s.restart(None);
    let mut c = conn(&s);
    let after = info(&mut c, "s");
    assert_eq!((after.limit, after.used, after.token), (3, 3, b));
    assert_eq!(after.holders["a"], (2, a));
    // Tokens move on above what was seen.
    r!(c, "SEMAPHORE.RELEASE", "s", "a");
    assert!(token(&acquire(&mut c, "s", "c", 3, 1)) > b);
}

#[test]
fn grants_releases_and_lapses_are_keyspace_events() {
    let s = Server::with(debug_opts().arg("notify-keyspace-events", "KEd"));
    let mut sub = s.client().get_connection().unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut ps = sub.as_pubsub();
    ps.psubscribe("__keyspace@0__:s").unwrap();
    let mut c = conn(&s);
    token(&r!(c, "SEMAPHORE.ACQUIRE", "s", "a", 2, 200));
    r!(c, "SEMAPHORE.ACQUIRE", "s", "b", 2, LONG);
    r!(c, "SEMAPHORE.RELEASE", "s", "b");
    let mut events = Vec::new();
    for _ in 0..4 {
        let m = ps.get_message().expect("an event");
        events.push(m.get_payload::<String>().unwrap());
    }
    assert_eq!(
        events,
        [
            "semaphore.acquire",
            "semaphore.acquire",
            "semaphore.release",
            "semaphore.lapse"
        ]
    );
}
