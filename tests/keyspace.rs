//! A key's lease state under every keyspace operation (issue 11): SWAPDB carries waiters and
//! lapse timers to the other db; RENAME, MOVE, COPY and RESTORE keep lapses and hand-offs; a
//! held key deleted by any route leaves no entry in the module's key index; RESTORE payloads
//! with huge tokens are refused; an AOF rewrite without the RDB preamble keeps a key's last token;
//! DEBUG RELOAD keeps waiters waiting. Also: WAIT timeouts answer at their deadline, and an
//! upgrade request costs the same behind 12,000 waiters as behind none.
//!
//! The tests of this file run one at a time (`serial`): several measure time.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis_lease_testkit::crowd::Crowd;
use redis_lease_testkit::dump::{self, Field, Payload};
use redis_lease_testkit::prelude::*;
use redis_lease_testkit::timed::{send_timed, Pending};
use redis_lease_testkit::usage::command_stats;

const LONG: u64 = 60_000;
/// A lease short enough to lapse during a test.
const SHORT: u64 = 300;
/// How late after a lapse its waiter may be served (the module's timer answers within a few
/// ms; this allows for a loaded 2-core machine).
const LAPSE_SLACK: Duration = Duration::from_millis(100);

fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes a write lock with a short lease; answers (token, sent, replied): the lease ends
/// between `sent + ttl` and `replied + ttl`.
fn short_hold(c: &mut Connection, key: &str, owner: &str, ttl: u64) -> (i64, Instant, Instant) {
    let sent = Instant::now();
    let t = wlock(c, key, owner, ttl).unwrap_or_else(|| panic!("{key}: {owner} not granted"));
    (t, sent, Instant::now())
}

/// The waiter's reply: a token, given no earlier than `sent + ttl` (the lease's earliest end)
/// and no later than `replied + ttl + LAPSE_SLACK`.
fn served_at_lapse(
    p: Pending,
    sent: Instant,
    replied: Instant,
    ttl: u64,
    what: &str,
) -> (i64, Instant) {
    let (reply, at) = p.wait(Duration::from_secs(10));
    let t = reply
        .unwrap_or_else(|e| panic!("{what}: error {e}"))
        .unwrap_or_else(|| panic!("{what}: nil (never handed the lock at the lapse)"));
    let ttl = Duration::from_millis(ttl);
    assert!(
        at >= sent + ttl,
        "{what}: served {:?} before the lease could end",
        sent + ttl - at
    );
    let late = at.saturating_duration_since(replied + ttl);
    println!("{what}: served at most {late:?} after the lapse");
    assert!(
        late <= LAPSE_SLACK,
        "{what}: served {late:?} after the lapse"
    );
    (t, at)
}

/// Waits (bounded) until the module's key index is empty: no indexed key, no wake-up.
fn assert_index_empty(c: &mut Connection, what: &str) {
    let mut last = (0, 0);
    let empty = eventually(Duration::from_secs(1), || {
        last.0 = info_int(c, "lease", "lease_scheduled_wakeups");
        last.0 == 0 && {
            last.1 = info_int(c, "lease", "lease_indexed_keys");
            last.1 == 0
        }
    });
    assert!(
        empty,
        "{what}: lease_scheduled_wakeups {} lease_indexed_keys {} (should be 0)",
        last.0, last.1
    );
}

/// Nothing of the module is left on the server: no key in db 0 or 1, no holder, no index.
fn assert_nothing_left(s: &Server, what: &str) {
    let (mut c0, mut c1) = (conn_db(s, 0), conn_db(s, 1));
    let gone = eventually(Duration::from_secs(1), || {
        dbsize(&mut c0) == 0
            && dbsize(&mut c1) == 0
            && info_int(&mut c0, "lease", "lease_holders") == 0
            && info_int(&mut c0, "lease", "lease_keys") == 0
    });
    assert!(
        gone,
        "{what}: left behind: dbsize {} and {}, lease_holders {}, lease_keys {}",
        dbsize(&mut c0),
        dbsize(&mut c1),
        info_int(&mut c0, "lease", "lease_holders"),
        info_int(&mut c0, "lease", "lease_keys")
    );
    assert_index_empty(&mut c0, what);
}

fn swapdb(c: &mut Connection) {
    assert_eq!(text(&r!(c, "SWAPDB", 0, 1)), "OK");
}

fn ttl_s(ms: u64) -> String {
    ms.to_string()
}

// ---------------------------------------------------------------------------------------------
// SWAPDB

#[test]
fn swapdb_waiter_is_served_at_the_lapse_and_the_key_goes_with_its_unlock() {
    let _g = serial();
    let s = Server::start();
    let (mut c0, mut c1) = (conn_db(&s, 0), conn_db(&s, 1));
    let (ta, sent, replied) = short_hold(&mut c0, "k", "A", SHORT);
    let b = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "B", "5000", "WAIT", "3000"]);
    await_waiters(&mut c0, "k", 1);
    swapdb(&mut c0);
    assert_eq!((exists(&mut c0, "k"), exists(&mut c1, "k")), (0, 1));
    assert_eq!(
        lock_info(&mut c1, "k").waiters,
        1,
        "the waiter follows its key"
    );
    let (tb, _) = served_at_lapse(b, sent, replied, SHORT, "B after SWAPDB");
    assert!(tb > ta);
    let info = lock_info(&mut c1, "k");
    assert_eq!(info.owners(), ["B"], "{info:?}");
    assert_eq!(info.holders[0].token, tb);
    assert_eq!(
        int(&r!(c1, "PTTL", "k")),
        -1,
        "lock keys carry no Redis TTL"
    );
    assert_eq!(unlock(&mut c1, "k", "B"), 1);
    assert_nothing_left(&s, "after B's unlock");
}

#[test]
fn swapdb_keeps_lapses_and_hand_offs_going_until_nothing_is_left() {
    let _g = serial();
    let s = Server::start();
    let (mut c0, mut c1) = (conn_db(&s, 0), conn_db(&s, 1));
    let (ta, sent, replied) = short_hold(&mut c0, "k", "A", SHORT);
    let b = send_timed(
        &s,
        0,
        &["RWLOCK.WLOCK", "k", "B", &ttl_s(SHORT), "WAIT", "3000"],
    );
    await_waiters(&mut c0, "k", 1);
    swapdb(&mut c0);
    // A fresh waiter on the moved key, behind B.
    let c = send_timed(
        &s,
        1,
        &["RWLOCK.WLOCK", "k", "C", &ttl_s(SHORT), "WAIT", "3000"],
    );
    await_waiters(&mut c1, "k", 2);
    let (tb, at_b) = served_at_lapse(b, sent, replied, SHORT, "B at A's lapse");
    // B's lease starts when it is granted, before its reply arrives.
    let (tc, _) = served_at_lapse(c, replied, at_b, SHORT, "C at B's lapse");
    assert!(ta < tb && tb < tc);
    // C's lease lapses too, with no waiter left: the key goes.
    sleep_until(now_ms() + SHORT as i64, 0);
    assert_nothing_left(&s, "after C's lapse");
}

#[test]
fn swapdb_moved_key_serves_a_fresh_waiter_at_its_holders_lapse() {
    let _g = serial();
    let s = Server::start();
    let (mut c0, mut c1) = (conn_db(&s, 0), conn_db(&s, 1));
    let (_, sent, replied) = short_hold(&mut c0, "k", "A", SHORT);
    swapdb(&mut c0);
    let w = send_timed(
        &s,
        1,
        &["RWLOCK.WLOCK", "k", "W", &ttl_s(SHORT), "WAIT", "3000"],
    );
    await_waiters(&mut c1, "k", 1);
    served_at_lapse(w, sent, replied, SHORT, "W on the moved key");
    // And the same key swapped back: its next holder lapses on time in db 0 again.
    swapdb(&mut c1);
    assert_eq!(lock_info(&mut c0, "k").owners(), ["W"]);
    sleep_until(now_ms() + SHORT as i64, 0);
    assert_nothing_left(&s, "after W's lapse in db 0");
}

#[test]
fn swapdb_exchanges_two_held_keys_of_one_name_with_their_waiters() {
    let _g = serial();
    let s = Server::start();
    let (mut c0, mut c1) = (conn_db(&s, 0), conn_db(&s, 1));
    // k in db 0 lapses first, k in db 1 later; each has its own waiter.
    let (t0, sent0, replied0) = short_hold(&mut c0, "k", "A0", SHORT);
    let (t1, sent1, replied1) = short_hold(&mut c1, "k", "A1", 2 * SHORT);
    let w0 = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "W0", "5000", "WAIT", "3000"]);
    let w1 = send_timed(&s, 1, &["RWLOCK.WLOCK", "k", "W1", "5000", "WAIT", "3000"]);
    await_waiters(&mut c0, "k", 1);
    await_waiters(&mut c1, "k", 1);
    swapdb(&mut c0);
    assert_eq!(lock_info(&mut c0, "k").owners(), ["A1"]);
    assert_eq!(lock_info(&mut c1, "k").owners(), ["A0"]);
    let (tw0, _) = served_at_lapse(w0, sent0, replied0, SHORT, "W0 (its key now in db 1)");
    let (tw1, _) = served_at_lapse(w1, sent1, replied1, 2 * SHORT, "W1 (its key now in db 0)");
    assert!(tw0 > t0 && tw1 > t1);
    assert_eq!(lock_info(&mut c1, "k").owners(), ["W0"]);
    assert_eq!(lock_info(&mut c0, "k").owners(), ["W1"]);
    assert_eq!(unlock(&mut c1, "k", "W0"), 1);
    assert_eq!(unlock(&mut c0, "k", "W1"), 1);
    assert_nothing_left(&s, "after both unlocks");
}

#[test]
fn swapdb_flushdb_of_the_keys_new_db_answers_lockgone_and_of_its_old_db_does_not() {
    let _g = serial();
    let s = Server::start();
    let (mut c0, mut c1) = (conn_db(&s, 0), conn_db(&s, 1));
    wlock(&mut c0, "k", "A", LONG).unwrap();
    let mut b = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "B", "5000", "WAIT", "20000"]);
    await_waiters(&mut c0, "k", 1);
    swapdb(&mut c0);
    // db 0 no longer holds k: flushing it leaves k and its waiter alone.
    assert_eq!(text(&r!(c0, "FLUSHDB")), "OK");
    b.assert_waiting_for(Duration::from_millis(300), "FLUSHDB of the old db");
    let info = lock_info(&mut c1, "k");
    assert_eq!(
        (info.owners(), info.waiters),
        (vec!["A".to_string()], 1),
        "{info:?}"
    );
    assert_eq!(info_int(&mut c0, "lease", "lease_waiters_lockgone"), 0);
    // db 1 holds it now: flushing it answers the waiter.
    assert_eq!(text(&r!(c1, "FLUSHDB")), "OK");
    let (reply, _) = b.wait(Duration::from_secs(2));
    let e = reply.expect_err("B after FLUSHDB of its key's db");
    assert!(e.contains("LOCKGONE"), "B: {e}");
    assert_eq!(info_int(&mut c0, "lease", "lease_waiters"), 0);
    assert_nothing_left(&s, "after FLUSHDB");
}

#[test]
fn rename_move_copy_and_restore_keep_lapses_and_hand_offs() {
    let _g = serial();
    let s = Server::start();
    let (mut c0, mut c1) = (conn_db(&s, 0), conn_db(&s, 1));
    let ttl = 500;
    let (_, sent, _) = short_hold(&mut c0, "r", "A", ttl);
    wlock(&mut c0, "m", "A", ttl).unwrap();
    wlock(&mut c0, "c", "A", ttl).unwrap();
    wlock(&mut c0, "d", "A", ttl).unwrap();
    // The last of the four leases ends by now + ttl.
    let replied = Instant::now();
    assert_eq!(text(&r!(c0, "RENAME", "r", "r2")), "OK");
    assert_eq!(int(&r!(c0, "MOVE", "m", 1)), 1);
    assert_eq!(int(&r!(c0, "COPY", "c", "c2")), 1);
    let payload = match r!(c0, "DUMP", "d") {
        Value::BulkString(b) => b,
        other => panic!("DUMP d: {other:?}"),
    };
    assert_eq!(text(&r!(c0, "RESTORE", "d2", 0, payload)), "OK");
    let waiters = [
        (0, "r2"),
        (1, "m"),
        (0, "c"),
        (0, "c2"),
        (0, "d"),
        (0, "d2"),
    ]
    .map(|(db, k)| {
        let p = send_timed(&s, db, &["RWLOCK.WLOCK", k, "W", "200", "WAIT", "3000"]);
        (db, k, p)
    });
    for (db, k, _) in &waiters {
        let c = if *db == 0 { &mut c0 } else { &mut c1 };
        await_waiters(c, k, 1);
    }
    for (db, k, p) in waiters {
        served_at_lapse(p, sent, replied, ttl, &format!("waiter on {k} in db {db}"));
    }
    sleep_until(now_ms() + 200, 0);
    assert_nothing_left(&s, "after the waiters' lapses");
}

// ---------------------------------------------------------------------------------------------
// Deleted keys leave no index entries

/// Holds `n` keys named `{prefix}{i}` (write, long lease); checks the index counts them.
fn hold_many(c: &mut Connection, prefix: &str, n: usize) -> Vec<String> {
    let indexed = |c: &mut Connection| lease_info(c).get("lease_indexed_keys").cloned();
    let before = indexed(c);
    let keys: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
    let mut p = redis::pipe();
    for k in &keys {
        p.cmd("RWLOCK.WLOCK").arg(k).arg("o").arg(LONG);
    }
    let tokens: Vec<Option<i64>> = p.query(c).expect("pipelined WLOCKs");
    assert!(
        tokens.iter().all(Option::is_some),
        "{prefix}: not all granted"
    );
    // (Checked where the field exists: `assert_index_empty` requires it, after the wake-ups.)
    if let Some(before) = before {
        let after: i64 = indexed(c).expect("lease_indexed_keys").parse().unwrap();
        assert_eq!(
            after,
            before.parse::<i64>().unwrap() + n as i64,
            "{prefix}: every held key is indexed"
        );
    }
    assert!(info_int(c, "lease", "lease_scheduled_wakeups") > 0);
    keys
}

fn run(c: &mut Connection, args: &[&str]) -> Value {
    let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    let v = exec_args(c, &argv).expect("io");
    assert!(!is_err(&v), "{args:?}: {v:?}");
    v
}

fn with_keys<'a>(head: &[&'a str], keys: &'a [String]) -> Vec<&'a str> {
    head.iter()
        .copied()
        .chain(keys.iter().map(String::as_str))
        .collect()
}

#[test]
fn held_keys_deleted_by_any_route_leave_no_index_entries() {
    let _g = serial();
    let s = debug_server();
    let other = Server::start();
    let mut c = conn(&s);
    let n = 20;
    let routes: &[&str] = &[
        "DEL",
        "UNLINK",
        "FLUSHALL",
        "FLUSHALL ASYNC",
        "FLUSHDB",
        "FLUSHDB ASYNC",
        "RENAME a string over",
        "RENAME a lock over",
        "COPY REPLACE over",
        "SET over",
        "SUNIONSTORE over",
        "MOVE then DEL in the other db",
        "PEXPIRE in the past",
        "RESTORE REPLACE a string over",
        "PEXPIRE then lazy expiry",
        "PEXPIRE then active expiry",
        "MIGRATE",
    ];
    for &route in routes {
        let keys = hold_many(&mut c, &format!("{route}:"), n);
        // One key also has a waiter, which the deletion answers.
        let w = send_timed(
            &s,
            0,
            &[
                "RWLOCK.WLOCK",
                keys[0].as_str(),
                "w",
                "1000",
                "WAIT",
                "20000",
            ],
        );
        await_waiters(&mut c, &keys[0], 1);
        match route {
            "DEL" | "UNLINK" => {
                run(&mut c, &with_keys(&[route], &keys));
            }
            "FLUSHALL" | "FLUSHALL ASYNC" | "FLUSHDB" | "FLUSHDB ASYNC" => {
                run(&mut c, &route.split(' ').collect::<Vec<_>>());
            }
            "RENAME a string over" => {
                for k in &keys {
                    run(&mut c, &["SET", "src", "v"]);
                    run(&mut c, &["RENAME", "src", k]);
                }
            }
            "RENAME a lock over" => {
                let srcs = hold_many(&mut c, "lock-src:", n);
                for (src, k) in srcs.iter().zip(&keys) {
                    run(&mut c, &["RENAME", src, k]);
                }
                assert_eq!(
                    info_int(&mut c, "lease", "lease_indexed_keys"),
                    n as i64,
                    "{route}: one index entry per remaining key"
                );
                run(&mut c, &with_keys(&["DEL"], &keys));
            }
            "COPY REPLACE over" => {
                let srcs = hold_many(&mut c, "copy-src:", n);
                for (src, k) in srcs.iter().zip(&keys) {
                    run(&mut c, &["COPY", src, k, "REPLACE"]);
                }
                assert_eq!(
                    info_int(&mut c, "lease", "lease_indexed_keys"),
                    2 * n as i64,
                    "{route}: one index entry per key"
                );
                run(&mut c, &with_keys(&["DEL"], &keys));
                run(&mut c, &with_keys(&["DEL"], &srcs));
            }
            "SET over" => {
                for k in &keys {
                    run(&mut c, &["SET", k, "v"]);
                }
            }
            "SUNIONSTORE over" => {
                run(&mut c, &["SADD", "set", "m"]);
                for k in &keys {
                    run(&mut c, &["SUNIONSTORE", k, "set"]);
                }
            }
            "MOVE then DEL in the other db" => {
                for k in &keys {
                    assert_eq!(int(&run(&mut c, &["MOVE", k, "1"])), 1);
                }
                let mut c1 = conn_db(&s, 1);
                assert_eq!(info_int(&mut c1, "lease", "lease_indexed_keys"), n as i64);
                run(&mut c1, &with_keys(&["DEL"], &keys));
            }
            "PEXPIRE in the past" => {
                for k in &keys {
                    run(&mut c, &["PEXPIRE", k, "0"]);
                }
            }
            "RESTORE REPLACE a string over" => {
                run(&mut c, &["SET", "src", "v"]);
                let payload = match r!(c, "DUMP", "src") {
                    Value::BulkString(b) => b,
                    other => panic!("DUMP src: {other:?}"),
                };
                for k in &keys {
                    let v = r!(c, "RESTORE", k, 0, payload.as_slice(), "REPLACE");
                    assert_eq!(text(&v), "OK");
                }
            }
            "PEXPIRE then lazy expiry" | "PEXPIRE then active expiry" => {
                for k in &keys {
                    run(&mut c, &["PEXPIRE", k, "20"]);
                }
                sleep_until(now_ms() + 50, 0);
                if route.contains("lazy") {
                    for k in &keys {
                        assert_eq!(exists(&mut c, k), 0, "{k} expired");
                    }
                } else {
                    until(Duration::from_secs(5), "active expiry", || {
                        info_int(&mut c, "stats", "expired_keys") >= n as i64
                    });
                }
            }
            "MIGRATE" => {
                let port = other.port.to_string();
                let v = run(
                    &mut c,
                    &with_keys(
                        &["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"],
                        &keys,
                    ),
                );
                assert_eq!(text(&v), "OK");
                let mut o = conn(&other);
                assert_eq!(dbsize(&mut o), n as i64, "migrated");
                assert_eq!(info_int(&mut o, "lease", "lease_indexed_keys"), n as i64);
                run(&mut o, &["FLUSHALL"]);
                assert_index_empty(&mut o, "the MIGRATE target after FLUSHALL");
            }
            other => unreachable!("{other}"),
        }
        let (reply, _) = w.wait(Duration::from_secs(10));
        let gone = reply.expect_err(&format!("{route}: the waiter"));
        assert!(gone.contains("LOCKGONE"), "{route}: the waiter got {gone}");
        for k in &keys {
            let t = text(&r!(c, "TYPE", k));
            assert!(!t.starts_with("lease"), "{route}: {k} is still a {t}");
        }
        // Before any cleanup: a FLUSHALL could drop entries the route left behind.
        assert_index_empty(&mut c, route);
        let _ = r!(c, "FLUSHALL");
    }
}

#[test]
fn del_of_10000_held_keys_leaves_no_index_entries() {
    let _g = serial();
    let s = Server::start();
    let mut c = conn(&s);
    let keys = hold_many(&mut c, "k", 10_000);
    for chunk in keys.chunks(1000) {
        let mut p = redis::pipe();
        for k in chunk {
            p.cmd("DEL").arg(k);
        }
        let n: Vec<i64> = p.query(&mut c).expect("pipelined DELs");
        assert!(n.iter().all(|&x| x == 1));
    }
    assert_eq!(dbsize(&mut c), 0);
    assert_index_empty(&mut c, "after 10,000 DELs");
    assert_eq!(info_int(&mut c, "lease", "lease_holders"), 0);
}

// ---------------------------------------------------------------------------------------------
// WAIT timeouts answer at their deadline

#[test]
fn wait_timeouts_answer_nil_at_their_deadline() {
    let _g = serial();
    let s = Server::start();
    let mut c = conn(&s);
    wlock(&mut c, "k", "A", LONG).unwrap();
    let mut w = conn(&s);
    let mut report = Vec::new();
    for ms in [1u64, 5, 20, 50] {
        let mut late = Vec::new();
        for _ in 0..20 {
            let t0 = Instant::now();
            let v = r!(w, "RWLOCK.WLOCK", "k", "B", 1000, "WAIT", ms);
            let took = t0.elapsed();
            assert!(is_nil(&v), "WAIT {ms}: {v:?}");
            // Signed: an early answer is `a_wait_never_ends_before_its_time`'s to catch.
            late.push(took.as_secs_f64() * 1000.0 - ms as f64);
        }
        let (p50, p90, max) = (
            percentile(&mut late, 50.0),
            percentile(&mut late, 90.0),
            percentile(&mut late, 100.0),
        );
        report.push(format!(
            "WAIT {ms}: late p50 {p50:.1} p90 {p90:.1} max {max:.1} ms"
        ));
        assert!(
            p50 < 15.0 && p90 < 30.0,
            "WAIT {ms}: answered late: p50 {p50:.1} ms p90 {p90:.1} ms max {max:.1} ms"
        );
    }
    println!(
        "wait timeout lateness ({}): {}",
        server_binary(),
        report.join("; ")
    );
    assert_eq!(lock_info(&mut c, "k").waiters, 0);
    assert_eq!(info_int(&mut c, "lease", "lease_wait_timeouts"), 80);
}

#[test]
fn a_wait_never_ends_before_its_time() {
    let _g = serial();
    let s = Server::start();
    let mut c = conn(&s);
    wlock(&mut c, "k", "A", LONG).unwrap();
    let mut w = conn(&s);
    // Many short waits: one that starts late in a ms and is armed in the next shows it.
    const TRIES: usize = 1500;
    // (A module whose waits end at Redis's hz would take minutes: stop after 10 s.)
    let start = Instant::now();
    let mut early = Vec::new();
    for _ in (0..TRIES).take_while(|_| start.elapsed() < Duration::from_secs(10)) {
        let t0 = Instant::now();
        let v = r!(w, "RWLOCK.WLOCK", "k", "B", 1000, "WAIT", 1);
        let took = t0.elapsed();
        assert!(is_nil(&v), "WAIT 1: {v:?}");
        if took < Duration::from_millis(1) {
            early.push(took);
        }
    }
    assert!(
        early.is_empty(),
        "{} of {TRIES} WAIT 1 answered nil before 1 ms had passed (round trip included): \
         {early:?}",
        early.len()
    );
}

// ---------------------------------------------------------------------------------------------
// An upgrade request costs the same behind a long queue

/// `n` upgrade requests of `owner` (a reader beside others) with a 1 ms wait, each answered
/// nil: (usec_per_call of RWLOCK.WLOCK from INFO commandstats, median round trip in µs).
fn upgrade_cost(c: &mut Connection, owner: &str, n: usize) -> (f64, f64) {
    let _ = r!(c, "CONFIG", "RESETSTAT");
    let mut rtt = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        let v = r!(c, "RWLOCK.WLOCK", "k", owner, LONG, "WAIT", 1);
        rtt.push(t0.elapsed().as_secs_f64() * 1e6);
        assert!(is_nil(&v), "upgrade of {owner}: {v:?}");
    }
    let st = command_stats(c, "rwlock.wlock");
    assert_eq!(
        st.get("calls").copied(),
        Some(n as f64),
        "commandstats: {st:?}"
    );
    (st["usec_per_call"], percentile(&mut rtt, 50.0))
}

#[test]
fn an_upgrade_request_costs_the_same_behind_12000_waiters() {
    let _g = serial();
    let waiters = 12_000;
    // hz 500: a module whose timeouts Redis answers (at hz) still answers a 1 ms wait soon.
    let s = Server::with(
        Options::default()
            .arg("maxclients", "13000")
            .arg("hz", "500")
            .module_arg("max-waiters", "20000"),
    );
    let mut c = conn(&s);
    rlock(&mut c, "k", "r1", LONG).unwrap();
    rlock(&mut c, "k", "r2", LONG).unwrap();
    let calls = 300;
    let empty = upgrade_cost(&mut c, "r2", calls);
    let mut crowd = Crowd::connect(s.port, waiters);
    crowd.send_each(|i| {
        ["RWLOCK.WLOCK", "k", &format!("w{i}"), "60000", "WAIT", "0"]
            .map(String::from)
            .to_vec()
    });
    let mut last = 0;
    let queued = eventually(Duration::from_secs(30), || {
        last = lock_info(&mut c, "k").waiters;
        last == waiters as i64
    });
    assert!(queued, "only {last} of {waiters} waiters queued");
    let loaded = upgrade_cost(&mut c, "r2", calls);
    println!(
        "upgrade request with WAIT ({}): usec_per_call {:.1} with no waiters, {:.1} with \
         {waiters}; median round trip {:.0} µs and {:.0} µs",
        server_binary(),
        empty.0,
        loaded.0,
        empty.1,
        loaded.1
    );
    assert!(
        loaded.0 < 200.0 && loaded.0 < 10.0 * empty.0.max(5.0),
        "an upgrade request behind {waiters} waiters costs {:.1} µs, against {:.1} µs behind none",
        loaded.0,
        empty.0
    );
    // The upgrader still goes ahead of the queue: r1 leaves, r2 gets the write lock.
    let up = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "r2", "60000", "WAIT", "5000"]);
    await_waiters(&mut c, "k", waiters as i64 + 1);
    assert_eq!(unlock(&mut c, "k", "r1"), 1);
    let (t, _) = up.wait(Duration::from_secs(10));
    assert!(
        t.expect("upgrade").is_some(),
        "the upgrade is granted first"
    );
    crowd.close();
}

/// The bookkeeping behind that cost must still see every waiting upgrade: a write request
/// queued before its owner became a reader counts as one (a second reader's upgrade with
/// WAIT is a DEADLOCK), and one whose owner stopped reading does not.
#[test]
fn a_write_request_queued_before_its_owner_read_counts_as_a_waiting_upgrade() {
    let _g = serial();
    let s = Server::start();
    let mut c = conn(&s);
    wlock(&mut c, "k", "W", LONG).unwrap();
    let parked = |args: &[&str], n: i64, c: &mut Connection| {
        let p = send_timed(&s, 0, args);
        await_waiters(c, "k", n);
        p
    };
    let xr = parked(&["RWLOCK.RLOCK", "k", "x", "60000", "WAIT", "0"], 1, &mut c);
    let yr = parked(&["RWLOCK.RLOCK", "k", "y", "60000", "WAIT", "0"], 2, &mut c);
    let mut w0 = parked(
        &["RWLOCK.WLOCK", "k", "w0", "60000", "WAIT", "0"],
        3,
        &mut c,
    );
    let mut xw = parked(&["RWLOCK.WLOCK", "k", "x", "60000", "WAIT", "0"], 4, &mut c);
    // W leaves: the run of readers at the head (x, y) is granted; w0 and x's write wait.
    assert_eq!(unlock(&mut c, "k", "W"), 1);
    for (p, who) in [(xr, "x"), (yr, "y")] {
        let (r, _) = p.wait(Duration::from_secs(2));
        assert!(r.unwrap().is_some(), "{who}'s read");
    }
    assert_eq!(lock_info(&mut c, "k").owners(), ["x", "y"]);
    let v = r!(c, "RWLOCK.WLOCK", "k", "y", LONG, "WAIT", 5000);
    assert!(
        is_err(&v) && err(&v).starts_with("DEADLOCK"),
        "y's upgrade while x's write request waits: {v:?}"
    );
    w0.assert_waiting_for(Duration::from_millis(0), "x and y read");
    xw.assert_waiting_for(Duration::from_millis(0), "y reads");
    drop((w0, xw));
}

/// x stops reading by UNLOCK, or (`by_lapse`) its read lease lapses.
fn queued_write_of_a_former_reader(by_lapse: bool) {
    let _g = serial();
    let s = Server::start();
    let mut c = conn(&s);
    rlock(&mut c, "k", "x", if by_lapse { SHORT } else { LONG }).unwrap();
    for o in ["y", "z"] {
        rlock(&mut c, "k", o, LONG).unwrap();
    }
    // x waits to upgrade on two connections: the second is an ordinary queued write request.
    let mut x1 = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "x", "60000", "WAIT", "0"]);
    await_waiters(&mut c, "k", 1);
    let mut x2 = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "x", "60000", "WAIT", "0"]);
    await_waiters(&mut c, "k", 2);
    // x stops reading: its write requests are no upgrades any more.
    if by_lapse {
        until(Duration::from_secs(2), "x's read lapses", || {
            info_int(&mut c, "lease", "lease_lapses") == 1
        });
    } else {
        assert_eq!(unlock(&mut c, "k", "x"), 1);
    }
    assert_eq!(lock_info(&mut c, "k").owners(), ["y", "z"]);
    let mut y = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "y", "60000", "WAIT", "5000"]);
    y.assert_waiting_for(Duration::from_millis(200), "y's upgrade is the only one");
    // z leaves: y, the sole reader, upgrades ahead of x's requests.
    assert_eq!(unlock(&mut c, "k", "z"), 1);
    let (r, _) = y.wait(Duration::from_secs(2));
    assert!(r.expect("y's upgrade").is_some(), "y upgraded");
    x1.assert_waiting_for(Duration::from_millis(0), "y writes");
    x2.assert_waiting_for(Duration::from_millis(0), "y writes");
    let info = lock_info(&mut c, "k");
    assert_eq!(info.mode, "write", "{info:?}");
}

#[test]
fn a_queued_write_request_whose_owner_unlocked_is_no_waiting_upgrade() {
    queued_write_of_a_former_reader(false);
}

#[test]
fn a_queued_write_request_whose_owners_read_lapsed_is_no_waiting_upgrade() {
    queued_write_of_a_former_reader(true);
}

// ---------------------------------------------------------------------------------------------
// Smaller: crafted RESTORE, AOF rewrite without preamble, DEBUG RELOAD

/// A real DUMP of `key`, decoded (`dump` checks its CRC).
fn dumped(c: &mut Connection, key: &str) -> Payload {
    match r!(c, "DUMP", key) {
        Value::BulkString(b) => dump::decode(&b).unwrap_or_else(|e| panic!("DUMP {key}: {e}")),
        other => panic!("DUMP {key}: {other:?}"),
    }
}

/// `p` with every unsigned field equal to `from` set to `to` (a token is stored as the key's
/// last token and as its holder's), re-encoded; and how many fields changed.
fn retokened(p: &Payload, from: i64, to: u64, only: Option<usize>) -> (Vec<u8>, usize) {
    let mut q = p.clone();
    let mut n = 0;
    for f in q.fields.iter_mut() {
        if *f == Field::U64(from as u64) {
            if only.is_none_or(|k| k == n) {
                *f = Field::U64(to);
            }
            n += 1;
        }
    }
    (dump::encode(&q), n)
}

/// tests/guard.rs crafts payloads field by field; this patches real DUMPs of each type, also
/// RESTORE REPLACE over the live key, at 2^63-1 and just above the 2^62 bound.
#[test]
fn a_restore_payload_with_a_huge_token_is_refused_and_grants_go_on() {
    let _g = serial();
    let s = Server::start();
    let mut c = conn(&s);
    let t = wlock(&mut c, "k", "A", LONG).unwrap();
    let term = token(&r!(c, "LEADER.CAMPAIGN", "e", "L", LONG));
    let st = token(&r!(c, "SEMAPHORE.ACQUIRE", "sem", "S", 2, LONG));
    let high_water = info_int(&mut c, "lease", "lease_token_high_water");
    let before = lock_info(&mut c, "k");
    for (key, t) in [("k", t), ("e", term), ("sem", st)] {
        let p = dumped(&mut c, key);
        // The unchanged payload restores: a refusal below is the token's doing.
        let (same, n) = retokened(&p, t, t as u64, None);
        assert_eq!(n, 2, "{key}: token {t} twice in {p:?}");
        assert_eq!(text(&r!(c, "RESTORE", "copy", 0, same.as_slice())), "OK");
        assert_eq!(int(&r!(c, "DEL", "copy")), 1);
        for huge in [(1u64 << 62) + 1, i64::MAX as u64] {
            for only in [Some(0), Some(1), None] {
                let (crafted, _) = retokened(&p, t, huge, only);
                let what = format!("{key}: token {huge} in field {only:?}");
                let v = r!(c, "RESTORE", "crafted", 0, crafted.as_slice());
                assert!(is_err(&v), "RESTORE of {what}: {v:?}");
                assert_eq!(exists(&mut c, "crafted"), 0, "{what}");
                let v = r!(c, "RESTORE", key, 0, crafted.as_slice(), "REPLACE");
                assert!(is_err(&v), "RESTORE REPLACE of {what}: {v:?}");
            }
        }
    }
    assert_same_lock(
        "k after the refusals",
        &before,
        &lock_info(&mut c, "k"),
        true,
    );
    assert_eq!(
        info_int(&mut c, "lease", "lease_token_high_water"),
        high_water,
        "a refused RESTORE changes nothing"
    );
    let t2 = wlock(&mut c, "fresh", "B", LONG).expect("grants go on");
    assert!(t2 > high_water && t2 < 1 << 62, "token {t2}");
    assert_eq!(unlock(&mut c, "k", "A"), 1);
    assert!(wlock(&mut c, "k", "C", LONG).unwrap() > t2);
}

fn aof_server() -> Server {
    Server::with(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always")
            .arg("aof-use-rdb-preamble", "no"),
    )
}

/// BGREWRITEAOF (it must succeed), then a restart from the rewritten AOF.
fn rewrite_and_restart(s: &mut Server, c: &mut Connection) {
    wait_persistence_idle(c);
    let v = r!(c, "BGREWRITEAOF");
    assert!(!is_err(&v), "BGREWRITEAOF: {v:?}");
    wait_persistence_idle(c);
    assert_eq!(
        info_field(c, "persistence", "aof_last_bgrewrite_status").as_deref(),
        Some("ok")
    );
    s.restart(None);
}

#[test]
fn aof_rewrite_without_preamble_keeps_the_keys_last_token() {
    let _g = serial();
    let mut s = aof_server();
    let mut c = conn(&s);
    let ta = rlock(&mut c, "k", "a", LONG).unwrap();
    let tb = rlock(&mut c, "k", "b", LONG).unwrap();
    assert_eq!(unlock(&mut c, "k", "b"), 1);
    let before = lock_info(&mut c, "k");
    assert_eq!((before.token, before.max_token()), (tb, tb));
    assert!(ta < tb);
    // More holders than one rewrite command carries (64), the last one gone.
    for i in 0..150 {
        rlock(&mut c, "many", &format!("r{i}"), LONG).unwrap();
    }
    assert_eq!(unlock(&mut c, "many", "r149"), 1);
    let many = lock_info(&mut c, "many");
    assert_eq!(many.holders.len(), 149);
    assert!(many.token > many.holders.iter().map(|h| h.token).max().unwrap());
    rewrite_and_restart(&mut s, &mut c);
    let mut c = conn(&s);
    let after = lock_info(&mut c, "k");
    assert_same_lock(
        "BGREWRITEAOF (no preamble) + restart",
        &before,
        &after,
        true,
    );
    assert_eq!(after.token, tb, "the key's last token is b's");
    assert_same_lock(
        "a key of 149 holders",
        &many,
        &lock_info(&mut c, "many"),
        true,
    );
    assert!(wlock(&mut c, "other", "x", LONG).unwrap() > tb);
}

#[test]
fn aof_rewrite_without_preamble_keeps_a_semaphores_last_token() {
    let _g = serial();
    let mut s = aof_server();
    let mut c = conn(&s);
    let sem = |c: &mut Connection, o: &str| token(&r!(c, "SEMAPHORE.ACQUIRE", "sem", o, 3, LONG));
    let last = |c: &mut Connection| int(field(&pairs(&r!(c, "SEMAPHORE.INFO", "sem")), "token"));
    let sa = sem(&mut c, "a");
    let sb = sem(&mut c, "b");
    assert_eq!(int(&r!(c, "SEMAPHORE.RELEASE", "sem", "b")), 1);
    assert_eq!(last(&mut c), sb);
    assert!(sa < sb);
    rewrite_and_restart(&mut s, &mut c);
    let mut c = conn(&s);
    assert_eq!(last(&mut c), sb, "the semaphore's last token is b's");
    assert_eq!(sem(&mut c, "a"), sa, "a still holds");
}

#[test]
fn debug_reload_keeps_waiters_of_surviving_keys_waiting_and_flushall_answers_lockgone() {
    let _g = serial();
    let s = debug_server();
    let mut c = conn(&s);
    let ta = wlock(&mut c, "k", "A", LONG).unwrap();
    let mut b = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "B", "5000", "WAIT", "20000"]);
    await_waiters(&mut c, "k", 1);
    // And one in db 1, with a waiter.
    let mut c1 = conn_db(&s, 1);
    wlock(&mut c1, "k1", "A1", LONG).unwrap();
    let mut b1 = send_timed(
        &s,
        1,
        &["RWLOCK.WLOCK", "k1", "B1", "5000", "WAIT", "20000"],
    );
    await_waiters(&mut c1, "k1", 1);
    assert_eq!(text(&r!(c, "DEBUG", "RELOAD")), "OK");
    b.assert_waiting_for(Duration::from_millis(300), "DEBUG RELOAD kept k");
    b1.assert_waiting_for(Duration::from_millis(0), "DEBUG RELOAD kept k1");
    assert_eq!(lock_info(&mut c, "k").waiters, 1, "B still waits on k");
    assert_eq!(lock_info(&mut c1, "k1").waiters, 1, "B1 still waits on k1");
    assert_eq!(unlock(&mut c1, "k1", "A1"), 1);
    let (reply, _) = b1.wait(Duration::from_secs(2));
    assert!(
        reply.expect("B1's grant").is_some(),
        "B1 granted after A1's unlock"
    );
    assert_eq!(info_int(&mut c, "lease", "lease_waiters_lockgone"), 0);
    assert_eq!(unlock(&mut c, "k", "A"), 1);
    let (reply, _) = b.wait(Duration::from_secs(2));
    let tb = reply
        .expect("B's grant")
        .expect("B granted after A's unlock");
    assert!(tb > ta);
    assert_eq!(lock_info(&mut c, "k").owners(), ["B"]);

    let w = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "W", "5000", "WAIT", "20000"]);
    await_waiters(&mut c, "k", 1);
    assert_eq!(text(&r!(c, "FLUSHALL")), "OK");
    let (reply, _) = w.wait(Duration::from_secs(2));
    let e = reply.expect_err("W after FLUSHALL");
    assert!(e.contains("LOCKGONE"), "W: {e}");
    assert_index_empty(&mut c, "after FLUSHALL");
}
