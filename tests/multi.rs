//! The lock manager over the wire: RWLOCK.MLOCK / MUNLOCK / MRENEW (all or nothing, a FIFO
//! place on every key), DEADLOCK found by the server's wait-for graph (across kinds and dbs,
//! no false positives), and MAXHOLD caps. Waiters use raw sockets, so a lost or doubled
//! reply fails the test.

use std::collections::{BTreeMap, BTreeSet};
use std::thread;
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

const LONG: &str = "60000";

fn sock(s: &Server) -> Sock {
    Sock::connect(s.port)
}

fn tokens(r: &Resp) -> Vec<i64> {
    r.array().iter().map(|t| t.int()).collect()
}

/// The owners holding `key` now (from RWLOCK.INFO).
fn holders(c: &mut Sock, key: &str) -> Vec<String> {
    c.owners(key, "holders")
}

/// No reply arrives on `w` for a while: it is parked.
fn parked(w: &mut Sock) {
    let r = w.try_reply(Duration::from_millis(300)).expect("connection");
    assert!(r.is_none(), "expected a parked request, got {r:?}");
}

#[test]
fn mlock_is_all_or_nothing() {
    let s = Server::start();
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "x", LONG]).int() > 0);
    // b is held: nothing is taken, a stays free.
    assert!(c
        .cmd(&["RWLOCK.MLOCK", "3", "a", "b", "c", "o", LONG])
        .is_nil());
    assert!(holders(&mut c, "a").is_empty() && holders(&mut c, "c").is_empty());
    assert_eq!(
        c.cmd(&["EXISTS", "a", "c"]).int(),
        0,
        "no empty key is left behind"
    );
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "b", "x"]).int(), 1);
    let t = tokens(&c.cmd(&["RWLOCK.MLOCK", "3", "a", "b", "c", "o", LONG]));
    assert_eq!(t.len(), 3);
    for (k, tk) in ["a", "b", "c"].iter().zip(&t) {
        assert_eq!(holders(&mut c, k), vec!["o".to_string()]);
        let info = c.cmd(&["RWLOCK.INFO", k]);
        assert_eq!(info.get("token").unwrap().int(), *tk);
    }
    // Each key is an ordinary hold: RENEW and UNLOCK work on it alone.
    assert_eq!(c.cmd(&["RWLOCK.RENEW", "a", "o", "5000"]).int(), t[0]);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "o"]).int(), 1);
    assert_eq!(
        c.cmd(&["RWLOCK.MRENEW", "3", "a", "b", "c", "o", "9000"])
            .int(),
        2
    );
    assert_eq!(c.cmd(&["RWLOCK.MUNLOCK", "3", "a", "b", "c", "o"]).int(), 2);
    assert_eq!(c.cmd(&["DBSIZE"]).int(), 0);
    // Readers share, across keys.
    let r1 = tokens(&c.cmd(&["RWLOCK.MLOCK", "2", "a", "b", "r1", LONG, "READ"]));
    let r2 = tokens(&c.cmd(&["RWLOCK.MLOCK", "2", "b", "a", "r2", LONG, "read"]));
    assert_eq!((r1.len(), r2.len()), (2, 2));
    assert!(c.cmd(&["RWLOCK.MLOCK", "2", "a", "z", "w", LONG]).is_nil());
    // Re-entry: the owner's own keys count as grantable.
    assert_eq!(
        tokens(&c.cmd(&["RWLOCK.MLOCK", "2", "a", "d", "r1", LONG, "READ"]))[0],
        r1[0]
    );
}

#[test]
fn argument_errors_change_nothing() {
    let s = Server::start();
    let mut c = sock(&s);
    let e = |c: &mut Sock, args: &[&str]| c.cmd(args).err().to_string();
    assert!(e(&mut c, &["RWLOCK.MLOCK", "0", "a", "o", "100"]).contains("numkeys"));
    assert!(e(&mut c, &["RWLOCK.MLOCK", "65", "a", "o", "100"]).contains("numkeys"));
    assert!(e(&mut c, &["RWLOCK.MLOCK", "3", "a", "o", "100"]).contains("only"));
    assert!(e(&mut c, &["RWLOCK.MLOCK", "2", "a", "a", "o", "100"]).contains("more than once"));
    assert!(e(&mut c, &["RWLOCK.MLOCK", "1", "a", "o", "0"]).contains("ttl"));
    assert!(e(
        &mut c,
        &["RWLOCK.MLOCK", "1", "a", "o", "10", "READ", "READ"]
    )
    .contains("READ"));
    assert!(e(
        &mut c,
        &["RWLOCK.MLOCK", "1", "a", "o", "10", "PERMITS", "1"]
    )
    .contains("unknown"));
    assert!(e(&mut c, &["RWLOCK.MUNLOCK", "1", "a"]).contains("wrong number"));
    assert!(e(&mut c, &["RWLOCK.MRENEW", "1", "a", "o"]).contains("wrong number"));
    c.cmd(&["SET", "str", "v"]);
    assert!(e(&mut c, &["RWLOCK.MLOCK", "2", "a", "str", "o", "100"]).contains("WRONGTYPE"));
    assert_eq!(c.cmd(&["EXISTS", "a"]).int(), 0);
    // Keys at 2..numkeys+1, for COMMAND GETKEYS and Cluster routing.
    let keys = c.cmd(&[
        "COMMAND",
        "GETKEYS",
        "RWLOCK.MLOCK",
        "3",
        "x",
        "y",
        "z",
        "o",
        "100",
    ]);
    let keys: Vec<_> = keys.array().iter().map(|k| k.bytes().to_vec()).collect();
    assert_eq!(keys, vec![b"x".to_vec(), b"y".to_vec(), b"z".to_vec()]);
    let keys = c.cmd(&["COMMAND", "GETKEYS", "RWLOCK.MUNLOCK", "2", "x", "y", "o"]);
    assert_eq!(keys.array().len(), 2);
    assert_eq!(c.cmd(&["DBSIZE"]).int(), 1);
}

#[test]
fn a_waiting_mlock_keeps_its_place_on_every_key() {
    let s = Server::start();
    let mut c = sock(&s);
    c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]);
    let mut m = sock(&s);
    m.send(&[
        b"RWLOCK.MLOCK",
        b"2",
        b"a",
        b"b",
        b"m",
        b"60000",
        b"WAIT",
        b"20000",
    ]);
    parked(&mut m);
    // b is free, but the waiting MLOCK is first in its queue: nobody overtakes it there.
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).is_nil());
    assert!(c.cmd(&["RWLOCK.RLOCK", "b", "y", LONG]).is_nil());
    assert!(
        holders(&mut c, "b").is_empty(),
        "no partial hold while waiting"
    );
    let mut y = sock(&s);
    y.send(&[b"RWLOCK.WLOCK", b"b", b"y", b"60000", b"WAIT", b"20000"]);
    parked(&mut y);
    let info = c.cmd(&["RWLOCK.INFO", "b"]);
    assert_eq!(info.get("waiters").unwrap().int(), 2);
    // The last key frees up: granted on both at once.
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
    let t = tokens(&m.reply("MLOCK"));
    assert_eq!(t.len(), 2);
    assert_eq!(holders(&mut c, "a"), vec!["m".to_string()]);
    assert_eq!(holders(&mut c, "b"), vec!["m".to_string()]);
    parked(&mut y);
    assert_eq!(c.cmd(&["RWLOCK.MUNLOCK", "2", "a", "b", "m"]).int(), 2);
    assert!(y.reply("WLOCK b").int() > t[1]);
}

#[test]
fn a_waiting_mlock_times_out_and_leaves_every_queue() {
    let s = Server::start();
    let mut c = sock(&s);
    c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]);
    let t0 = Instant::now();
    let r = c.cmd(&["RWLOCK.MLOCK", "2", "b", "a", "m", LONG, "WAIT", "200"]);
    assert!(r.is_nil(), "{r:?}");
    assert!(t0.elapsed() >= Duration::from_millis(200));
    // Its place on b is gone: b is free for anyone.
    until(Duration::from_secs(5), "the waiter left its queues", || {
        c.cmd(&["RWLOCK.INFO", "b"])
            .get("waiters")
            .map_or(0, |w| w.int())
            == 0
    });
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
    // A waiter that disconnects leaves every queue too.
    let mut m = sock(&s);
    m.send(&[
        b"RWLOCK.MLOCK",
        b"2",
        b"c",
        b"a",
        b"m",
        b"60000",
        b"WAIT",
        b"0",
    ]);
    parked(&mut m);
    drop(m);
    until(Duration::from_secs(5), "the waiter left its queues", || {
        !c.cmd(&["RWLOCK.WLOCK", "c", "z", LONG]).is_nil()
    });
}

#[test]
fn deadlocks_are_refused_at_once() {
    let s = Server::start();
    let mut c = sock(&s);
    c.cmd(&["RWLOCK.WLOCK", "a", "o1", LONG]);
    c.cmd(&["RWLOCK.WLOCK", "b", "o2", LONG]);
    let mut w1 = sock(&s);
    w1.send(&[b"RWLOCK.WLOCK", b"b", b"o1", b"60000", b"WAIT", b"0"]);
    parked(&mut w1);
    let t0 = Instant::now();
    let e = c.cmd(&["RWLOCK.WLOCK", "a", "o2", LONG, "WAIT", "0"]);
    assert!(e.err().starts_with("DEADLOCK"), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(lease_info(&mut s.conn())["lease_deadlocks"], "1");
    // Nothing changed: o2 still holds b, o1 still waits for it and gets it on release.
    assert_eq!(holders(&mut c, "b"), vec!["o2".to_string()]);
    assert_eq!(
        c.cmd(&["RWLOCK.INFO", "a"]).get("waiters").unwrap().int(),
        0
    );
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "b", "o2"]).int(), 1);
    assert!(w1.reply("WLOCK b").int() > 0);

    // A longer cycle, through a queue: o3 holds c; o4 waits for c behind nobody; o1 (holding
    // a and b) asks for c: o1 -> o3. o3 asks for a: o3 -> o1, a cycle.
    c.cmd(&["RWLOCK.WLOCK", "c", "o3", LONG]);
    let mut w4 = sock(&s);
    w4.send(&[b"RWLOCK.WLOCK", b"c", b"o4", b"60000", b"WAIT", b"0"]);
    parked(&mut w4);
    let mut w1 = sock(&s);
    w1.send(&[b"RWLOCK.WLOCK", b"c", b"o1", b"60000", b"WAIT", b"0"]);
    parked(&mut w1);
    let e = c.cmd(&["RWLOCK.MLOCK", "2", "d", "b", "o3", LONG, "WAIT", "0"]);
    assert!(e.err().starts_with("DEADLOCK"), "{e:?}");
    assert_eq!(c.cmd(&["EXISTS", "d"]).int(), 0, "not queued anywhere");
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "c", "o3"]).int(), 1);
    assert!(w4.reply("WLOCK c (o4)").int() > 0);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "c", "o4"]).int(), 1);
    assert!(w1.reply("WLOCK c (o1)").int() > 0);
}

#[test]
fn no_deadlock_without_a_cycle() {
    let s = Server::start();
    let mut c = sock(&s);
    // A chain: o1 holds a; o2 holds b and waits for a; o3 waits for b. Not a cycle.
    c.cmd(&["RWLOCK.WLOCK", "a", "o1", LONG]);
    c.cmd(&["RWLOCK.WLOCK", "b", "o2", LONG]);
    let mut w2 = sock(&s);
    w2.send(&[b"RWLOCK.WLOCK", b"a", b"o2", b"60000", b"WAIT", b"0"]);
    parked(&mut w2);
    let mut w3 = sock(&s);
    w3.send(&[b"RWLOCK.WLOCK", b"b", b"o3", b"60000", b"WAIT", b"0"]);
    parked(&mut w3);
    // Readers with a reader holding: o2 reads c; o1 waits to read c behind nobody (granted).
    c.cmd(&["RWLOCK.RLOCK", "c", "o2", LONG]);
    assert!(c.cmd(&["RWLOCK.RLOCK", "c", "o1", LONG, "WAIT", "0"]).int() > 0);
    // A semaphore with room left by others: o2 holds 1 of 2 permits, o5 holds 1; o1 waits
    // for 1 permit. Either release serves o1, so o2 waiting on a (o1's) is no deadlock.
    c.cmd(&["SEMAPHORE.ACQUIRE", "s", "o5", "2", LONG]);
    c.cmd(&["SEMAPHORE.ACQUIRE", "s", "o2", "2", LONG]);
    let mut w1 = sock(&s);
    w1.send(&[
        b"SEMAPHORE.ACQUIRE",
        b"s",
        b"o1",
        b"2",
        b"60000",
        b"WAIT",
        b"0",
    ]);
    parked(&mut w1);
    assert_eq!(lease_info(&mut s.conn())["lease_deadlocks"], "0");
    assert_eq!(c.cmd(&["SEMAPHORE.RELEASE", "s", "o5"]).int(), 1);
    assert!(w1.reply("ACQUIRE s").int() > 0);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "o1"]).int(), 1);
    assert!(w2.reply("WLOCK a").int() > 0);
}

#[test]
fn deadlocks_are_found_across_kinds_and_dbs() {
    let s = Server::start();
    let mut c0 = sock(&s);
    let mut c1 = sock(&s);
    c1.cmd(&["SELECT", "1"]);
    c1.cmd(&["SEMAPHORE.ACQUIRE", "s", "o1", "1", LONG]);
    c0.cmd(&["LEADER.CAMPAIGN", "e", "o2", LONG]);
    let mut w = sock(&s);
    w.send(&[b"LEADER.CAMPAIGN", b"e", b"o1", b"60000", b"WAIT", b"0"]);
    parked(&mut w);
    let e = c1.cmd(&["SEMAPHORE.ACQUIRE", "s", "o2", "1", LONG, "WAIT", "0"]);
    assert!(e.err().starts_with("DEADLOCK"), "{e:?}");
    // The walk left the client in its own db.
    assert_eq!(
        c1.cmd(&["SEMAPHORE.INFO", "s"]).get("used").unwrap().int(),
        1
    );
    assert_eq!(
        c1.cmd(&["SEMAPHORE.INFO", "s"])
            .get("waiters")
            .unwrap()
            .int(),
        0
    );
    assert_eq!(c0.cmd(&["LEADER.RESIGN", "e", "o2"]).int(), 1);
    assert!(w.reply("CAMPAIGN").int() > 0);
}

#[test]
fn max_hold_caps_every_hold() {
    let s = Server::start();
    let mut c = sock(&s);
    let e = c.cmd(&["RWLOCK.WLOCK", "k", "o", "600", "MAXHOLD", "500"]);
    assert!(e.err().starts_with("MAXHOLD"), "{e:?}");
    assert_eq!(c.cmd(&["EXISTS", "k"]).int(), 0);
    let t = c
        .cmd(&["RWLOCK.WLOCK", "k", "o", "300", "MAXHOLD", "500"])
        .int();
    let info = c.cmd(&["RWLOCK.INFO", "k"]);
    let cap = info.get("holders").unwrap().array()[0]
        .get("cap")
        .unwrap()
        .int();
    assert!((400..=500).contains(&cap), "{cap}");
    // A renewal inside the cap is fine; past it is refused with the ms left, changing nothing.
    assert_eq!(c.cmd(&["RWLOCK.RENEW", "k", "o", "200"]).int(), t);
    let e = c.cmd(&["RWLOCK.RENEW", "k", "o", "600"]);
    let text = e.err().to_string();
    assert!(text.starts_with("MAXHOLD "), "{text}");
    let left: u64 = text.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(left <= 500, "{text}");
    let ttl = c.cmd(&["RWLOCK.INFO", "k"]).get("holders").unwrap().array()[0]
        .get("ttl")
        .unwrap()
        .int();
    assert!(ttl <= 200, "unchanged by the refused renewal: {ttl}");
    // Re-entry keeps the first grant's cap, whatever it asks.
    let e = c.cmd(&["RWLOCK.WLOCK", "k", "o", "5000", "MAXHOLD", "100000"]);
    assert!(e.err().starts_with("MAXHOLD"), "{e:?}");
    // MRENEW: all or none.
    c.cmd(&["RWLOCK.WLOCK", "free", "o", "300"]);
    let e = c.cmd(&["RWLOCK.MRENEW", "2", "free", "k", "o", "5000"]);
    assert!(e.err().starts_with("MAXHOLD"), "{e:?}");
    let ttl = c
        .cmd(&["RWLOCK.INFO", "free"])
        .get("holders")
        .unwrap()
        .array()[0]
        .get("ttl")
        .unwrap()
        .int();
    assert!(ttl <= 300, "{ttl}");
    // The other acquisitions take MAXHOLD too.
    assert!(c
        .cmd(&["LEADER.CAMPAIGN", "e", "o", "600", "MAXHOLD", "500"])
        .err()
        .starts_with("MAXHOLD"));
    assert!(c
        .cmd(&["SEMAPHORE.ACQUIRE", "s", "o", "2", "600", "MAXHOLD", "500"])
        .err()
        .starts_with("MAXHOLD"));
    assert!(c
        .cmd(&["RWLOCK.MLOCK", "1", "m", "o", "600", "MAXHOLD", "500"])
        .err()
        .starts_with("MAXHOLD"));
    assert!(
        c.cmd(&["SEMAPHORE.ACQUIRE", "s", "o", "2", "400", "MAXHOLD", "500"])
            .int()
            > 0
    );
    let e = c.cmd(&["SEMAPHORE.RENEW", "s", "o", "900"]);
    assert!(e.err().starts_with("MAXHOLD"), "{e:?}");
    // The server-wide cap: the smaller of the two applies.
    c.cmd(&["CONFIG", "SET", "lease.max-hold", "1000"]);
    assert!(c
        .cmd(&["RWLOCK.WLOCK", "g", "o", "1500"])
        .err()
        .starts_with("MAXHOLD"));
    assert!(
        c.cmd(&["RWLOCK.WLOCK", "g", "o", "900", "MAXHOLD", "5000"])
            .int()
            > 0
    );
    assert!(c
        .cmd(&["RWLOCK.RENEW", "g", "o", "1200"])
        .err()
        .starts_with("MAXHOLD"));
    c.cmd(&["CONFIG", "SET", "lease.max-hold", "0"]);
    // No cap: INFO says -1.
    c.cmd(&["RWLOCK.WLOCK", "n", "o", "900"]);
    let info = c.cmd(&["RWLOCK.INFO", "n"]);
    assert_eq!(
        info.get("holders").unwrap().array()[0]
            .get("cap")
            .unwrap()
            .int(),
        -1
    );
}

#[test]
fn a_cap_survives_reload_and_restore() {
    let s = debug_server();
    let mut c = sock(&s);
    c.cmd(&["RWLOCK.WLOCK", "k", "o", "20000", "MAXHOLD", "30000"]);
    let cap = |c: &mut Sock, k: &str| {
        c.cmd(&["RWLOCK.INFO", k]).get("holders").unwrap().array()[0]
            .get("cap")
            .unwrap()
            .int()
    };
    assert!(cap(&mut c, "k") > 20000);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]).bytes(), b"OK");
    assert!(cap(&mut c, "k") > 20000, "RDB keeps the cap");
    assert!(c
        .cmd(&["RWLOCK.RENEW", "k", "o", "40000"])
        .err()
        .starts_with("MAXHOLD"));
    let dump = c.cmd(&["DUMP", "k"]).bytes().to_vec();
    let r = c.call(&[b"RESTORE", b"k2", b"0", &dump]);
    assert_eq!(r.bytes(), b"OK", "{r:?}");
    assert!(cap(&mut c, "k2") > 20000);
    // The AOF rewrite writes it too.
    c.cmd(&["CONFIG", "SET", "appendonly", "yes"]);
    until(Duration::from_secs(20), "the AOF rewrite", || {
        info_field(&mut s.conn(), "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
            && info_field(&mut s.conn(), "persistence", "aof_rewrite_scheduled").as_deref()
                == Some("0")
    });
    c.cmd(&["DEBUG", "LOADAOF"]);
    assert!(cap(&mut c, "k") > 20000, "the AOF keeps the cap");
}

/// Many owners take random key sets with WAIT (some also ask for one more key while holding,
/// which can close cycles): every request is answered exactly once, no owner ever holds part
/// of a set (checked on atomic snapshots of every key), and no request is left waiting in a
/// cycle (none times out: a cycle would have waited out its WAIT).
#[test]
fn random_key_sets_never_hold_partially_or_wait_in_a_cycle() {
    let s = Server::start();
    const KEYS: [&str; 6] = ["{k}a", "{k}b", "{k}c", "{k}d", "{k}e", "{k}f"];
    const WORKERS: usize = 10;
    const ROUNDS: usize = 40;
    let port = s.port;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut c = Sock::connect(port);
            let mut snapshots = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && snapshots < 100_000 {
                c.cmd(&["MULTI"]);
                for k in KEYS {
                    c.cmd(&["RWLOCK.INFO", k]);
                }
                let all = c.cmd(&["EXEC"]);
                let mut held: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
                for (k, info) in KEYS.iter().zip(all.array()) {
                    for h in info.get("holders").unwrap().array() {
                        let o =
                            String::from_utf8_lossy(h.get("owner").unwrap().bytes()).into_owned();
                        held.entry(o).or_default().insert(k.to_string());
                    }
                }
                for (o, keys) in &held {
                    // An owner is named for its set: "w3-17:{k}a,{k}c".
                    let set: BTreeSet<String> = o
                        .split(':')
                        .nth(1)
                        .unwrap()
                        .split(',')
                        .map(String::from)
                        .collect();
                    let inside: BTreeSet<_> = keys.intersection(&set).cloned().collect();
                    assert!(
                        inside.is_empty() || inside == set,
                        "partial hold: {o} holds {keys:?}"
                    );
                }
                snapshots += 1;
            }
            snapshots
        })
    };
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            thread::spawn(move || {
                let mut c = Sock::connect(port);
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ (w as u64 + 1).wrapping_mul(0x2545_f491);
                let mut next = move |n: usize| {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    (rng % n as u64) as usize
                };
                let (mut granted, mut deadlocks) = (0, 0);
                for round in 0..ROUNDS {
                    let n = 1 + next(3);
                    let mut set: Vec<&str> = Vec::new();
                    while set.len() < n {
                        let k = KEYS[next(KEYS.len())];
                        if !set.contains(&k) {
                            set.push(k);
                        }
                    }
                    let owner = format!("w{w}-{round}:{}", {
                        let mut s = set.clone();
                        s.sort();
                        s.join(",")
                    });
                    let mut args: Vec<String> = vec!["RWLOCK.MLOCK".into(), n.to_string()];
                    args.extend(set.iter().map(|k| k.to_string()));
                    args.extend([owner.clone(), "30000".into(), "WAIT".into(), "25000".into()]);
                    if next(3) == 0 {
                        args.push("READ".into());
                    }
                    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
                    let r = c.cmd(&a);
                    assert_eq!(r.array().len(), n, "{a:?}: {r:?}");
                    granted += 1;
                    // Sometimes ask for one more key while holding: may close a cycle.
                    let extra = KEYS[next(KEYS.len())];
                    let mut holds_extra = false;
                    if next(2) == 0 && !set.contains(&extra) {
                        let r = c.cmd(&["RWLOCK.WLOCK", extra, &owner, "30000", "WAIT", "25000"]);
                        match r {
                            Resp::Error(e) if e.starts_with("DEADLOCK") => deadlocks += 1,
                            Resp::Int(_) => holds_extra = true,
                            other => panic!("extra {extra} for {owner}: {other:?}"),
                        }
                    }
                    thread::sleep(Duration::from_millis(next(3) as u64));
                    if holds_extra {
                        assert_eq!(c.cmd(&["RWLOCK.UNLOCK", extra, &owner]).int(), 1);
                    }
                    let mut un: Vec<String> = vec!["RWLOCK.MUNLOCK".into(), n.to_string()];
                    un.extend(set.iter().map(|k| k.to_string()));
                    un.push(owner.clone());
                    let u: Vec<&str> = un.iter().map(|s| s.as_str()).collect();
                    assert_eq!(c.cmd(&u).int(), n as i64, "{u:?}");
                    // Exactly one reply per request: nothing more arrives.
                    assert!(c.try_reply(Duration::from_millis(0)).unwrap().is_none());
                }
                (granted, deadlocks)
            })
        })
        .collect();
    let mut total = (0, 0);
    for w in workers {
        let (g, d) = w.join().expect("worker");
        total.0 += g;
        total.1 += d;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let snapshots = checker.join().expect("checker");
    assert_eq!(total.0, WORKERS * ROUNDS);
    assert!(snapshots > 10, "{snapshots}");
    let info = lease_info(&mut s.conn());
    assert_eq!(info["lease_waiters"], "0");
    assert_eq!(
        info["lease_wait_timeouts"], "0",
        "a request waited out its WAIT: a cycle?"
    );
    assert_eq!(info["lease_deadlocks"], total.1.to_string());
    eprintln!(
        "granted {} sets, {} deadlocks refused, {snapshots} snapshots",
        total.0, total.1
    );
    let mut c = sock(&s);
    assert_eq!(c.cmd(&["DBSIZE"]).int(), 0);
}

/// A replica sees every key of an MLOCK grant, with its tokens and caps, and a parked
/// request's grant at hand-off; and refuses the multi-key commands itself.
#[test]
fn replicas_see_multi_key_grants_and_caps() {
    let master = Server::start();
    let replica = start_replica(&master);
    let mut m = sock(&master);
    let t = tokens(&m.cmd(&[
        "RWLOCK.MLOCK",
        "2",
        "ra",
        "rb",
        "o",
        LONG,
        "MAXHOLD",
        "90000",
    ]));
    m.cmd(&["RWLOCK.WLOCK", "rc", "x", LONG]);
    let mut w = sock(&master);
    w.send(&[
        b"RWLOCK.MLOCK",
        b"2",
        b"rc",
        b"rd",
        b"p",
        b"60000",
        b"WAIT",
        b"20000",
    ]);
    parked(&mut w);
    m.cmd(&["RWLOCK.UNLOCK", "rc", "x"]);
    let t2 = tokens(&w.reply("MLOCK rc rd"));
    sync(&master, &replica);
    let mut r = sock(&replica);
    for (k, tk, owner) in [
        ("ra", t[0], "o"),
        ("rb", t[1], "o"),
        ("rc", t2[0], "p"),
        ("rd", t2[1], "p"),
    ] {
        let info = r.cmd(&["RWLOCK.INFO", k]);
        let h = &info.get("holders").unwrap().array()[0];
        assert_eq!(
            h.get("owner").unwrap().bytes(),
            owner.as_bytes(),
            "{k}: {info:?}"
        );
        assert_eq!(h.get("token").unwrap().int(), tk, "{k}");
        let cap = h.get("cap").unwrap().int();
        if owner == "o" {
            assert!(cap > 60_000, "{k}: the cap replicated: {cap}");
        } else {
            assert_eq!(cap, -1, "{k}");
        }
    }
    let e = r.cmd(&["RWLOCK.MLOCK", "1", "re", "o", LONG]);
    assert!(e.err().starts_with("READONLY"), "{e:?}");
}

/// A multi-key request meets the hold-back lobby (a quarantine after a load): it waits in the
/// lobby of each of its keys, keeps its place there (a single-key request behind it on one of
/// them does not overtake it), a request of another kind on one of its names is refused as
/// with the key present, and when grants open it is granted on every key at once, once.
#[test]
fn a_multi_key_request_waits_in_the_lobby_and_is_granted_when_grants_open() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "lease.quarantine", "4000"])
            .bytes(),
        b"OK"
    );
    c.cmd(&["DEBUG", "RELOAD"]);
    let quarantine = |c: &mut Sock| {
        let i = c.cmd(&["INFO", "lease"]);
        let t = String::from_utf8_lossy(i.bytes()).into_owned();
        t.lines()
            .find_map(|l| l.strip_prefix("lease_quarantine_ms:"))
            .and_then(|v| v.trim().parse::<i64>().ok())
            .unwrap_or(0)
    };
    assert!(
        quarantine(&mut c) > 2000,
        "no quarantine after DEBUG RELOAD"
    );
    let started = Instant::now();
    let mut m = sock(&s);
    m.send(&[
        b"RWLOCK.MLOCK",
        b"2",
        b"qa",
        b"qb",
        b"m",
        b"4000",
        b"WAIT",
        b"10000",
    ]);
    parked(&mut m);
    let mut single = sock(&s);
    single.send(&[b"RWLOCK.WLOCK", b"qb", b"s", b"4000", b"WAIT", b"10000"]);
    parked(&mut single);
    // Another kind on one of its names: WRONGTYPE, as with the key present.
    let other = c.cmd(&["LEADER.CAMPAIGN", "qa", "x", "1000", "WAIT", "100"]);
    assert!(other.err().starts_with("WRONGTYPE"), "{other:?}");
    let got = m.reply_within(Duration::from_secs(12), "the multi-key request");
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "granted during the quarantine"
    );
    let t = tokens(&got);
    assert_eq!(t.len(), 2, "{got:?}");
    // Granted on both keys for real (it was answered tokens for a key it did not hold, and
    // the single-key request was then granted beside it, about 1 run in 20).
    assert_eq!(holders(&mut c, "qa"), vec!["m"]);
    assert_eq!(holders(&mut c, "qb"), vec!["m"]);
    // The single-key request behind it still waits, and is served when m lets go.
    parked(&mut single);
    assert_eq!(c.cmd(&["RWLOCK.MUNLOCK", "2", "qa", "qb", "m"]).int(), 2);
    let s_tok = single.reply_within(Duration::from_secs(5), "the single-key request");
    assert!(s_tok.int() > t[1], "{s_tok:?} after {t:?}");
    assert!(
        m.try_reply(Duration::from_millis(300)).unwrap().is_none(),
        "answered twice"
    );
}
