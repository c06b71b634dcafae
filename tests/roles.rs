//! Role changes (issue 11): a master demoted by `FAILOVER` or by hand (`REPLICAOF NO ONE` on
//! its replica, then `REPLICAOF` on it: a partial resync) answers its waiters, keeps no phantom
//! waiter, and from then on holds exactly its new master's dataset, key by key, through later
//! releases, hand-offs and lapses on the new master; its own timer changes nothing. A replica
//! refuses lock commands even when writable (`replica-read-only no`).

use std::time::Duration;

use redis_lease_testkit::dataset::converge;
use redis_lease_testkit::prelude::*;
use redis_lease_testkit::timed::{send_timed, Pending};

const LONG: u64 = 60_000;
const SETTLE: Duration = Duration::from_secs(10);

fn pair() -> (Server, Server) {
    let master = debug_server();
    let replica = start_replica(&master);
    sync(&master, &replica);
    (master, replica)
}

fn role(s: &Server) -> String {
    info_field(&mut conn(s), "replication", "role").unwrap_or_default()
}

/// Waits until `old` replicates from `new`, linked and caught up.
fn await_swapped(old: &Server, new: &Server, what: &str) {
    until(
        Duration::from_secs(20),
        &format!("{what}: roles swapped"),
        || {
            role(new) == "master"
                && role(old) == "slave"
                && info_field(&mut conn(old), "replication", "master_link_status").as_deref()
                    == Some("up")
        },
    );
    sync(new, old);
}

/// `FAILOVER TO <replica>`: the coordinated failover of Redis 7 (and Valkey).
fn failover(m: &Server, r: &Server) {
    let v = r!(
        conn(m),
        "FAILOVER",
        "TO",
        "127.0.0.1",
        r.port,
        "TIMEOUT",
        10_000
    );
    assert_eq!(text(&v), "OK", "FAILOVER: {v:?}");
    await_swapped(m, r, "FAILOVER");
}

/// By hand: the replica is promoted, then the old master follows it (a partial resync).
fn by_hand(m: &Server, r: &Server) {
    let mut cr = conn(r);
    let partial = info_int(&mut cr, "stats", "sync_partial_ok");
    assert_eq!(text(&r!(cr, "REPLICAOF", "NO", "ONE")), "OK");
    replicate_from(m, r);
    await_swapped(m, r, "REPLICAOF NO ONE + REPLICAOF");
    assert!(
        info_int(&mut cr, "stats", "sync_partial_ok") > partial,
        "the demoted master resynced partially"
    );
}

/// A waiter parked on the old master: answered an error by the demotion, never a grant or nil.
fn assert_unblocked(p: Pending, what: &str) {
    let (reply, _) = p.wait(Duration::from_secs(10));
    let e = match reply {
        Err(e) => e,
        Ok(v) => panic!("{what}: answered {v:?}; a demotion answers an error"),
    };
    println!("{what}: answered {e}");
    assert!(
        e.contains("UNBLOCKED") || e.contains("READONLY"),
        "{what}: {e}"
    );
}

fn demotion(demote: fn(&Server, &Server)) {
    let (m, r) = pair();
    let mut cm = conn(&m);
    let ta = wlock(&mut cm, "k", "A", LONG).unwrap();
    let b = send_timed(&m, 0, &["RWLOCK.WLOCK", "k", "B", "60000", "WAIT", "0"]);
    rlock(&mut cm, "q", "Q", LONG).unwrap();
    wlock(&mut cm, "q", "Q", LONG).unwrap();
    let c = send_timed(&m, 0, &["RWLOCK.RLOCK", "q", "C", "60000", "WAIT", "0"]);
    // A lease that ends after the demotion, while the new master is frozen.
    let short_ttl = 4000;
    wlock(&mut cm, "s", "S", short_ttl).unwrap();
    let s_deadline = lock_info(&mut cm, "s")
        .holder("S", "write")
        .unwrap()
        .deadline;
    await_waiters(&mut cm, "k", 1);
    await_waiters(&mut cm, "q", 1);
    sync(&m, &r);

    demote(&m, &r);
    assert_unblocked(b, "B waiting on k");
    assert_unblocked(c, "C waiting on q");
    let mut cm = conn(&m);
    let mut cr = conn(&r);
    // No phantom waiter on the demoted master.
    assert_eq!(info_int(&mut cm, "lease", "lease_waiters"), 0);
    assert_eq!(lock_info(&mut cm, "k").waiters, 0);
    assert_eq!(lock_info(&mut cm, "q").waiters, 0);
    converge(&m, &r, SETTLE, "after the demotion");

    // The demoted master's timer changes nothing: freeze the new master across s's lapse.
    assert!(
        now_ms() < s_deadline - 300,
        "the demotion took too long for the frozen-master check"
    );
    let holders = info_int(&mut cm, "lease", "lease_holders");
    signal(&r, "STOP");
    sleep_until(s_deadline, 500);
    let (h, n, e) = (
        info_int(&mut cm, "lease", "lease_holders"),
        dbsize(&mut cm),
        exists(&mut cm, "s"),
    );
    signal(&r, "CONT");
    assert_eq!(
        (h, n, e),
        (holders, 3, 1),
        "the demoted master changed state by itself"
    );
    until(SETTLE, "s lapses on the new master", || {
        exists(&mut cr, "s") == 0
    });
    converge(&m, &r, SETTLE, "after s's lapse on the new master");

    // A unlocks on the new master: k goes there, and on the demoted master too.
    assert_eq!(unlock(&mut cr, "k", "A"), 1);
    assert_eq!(exists(&mut cr, "k"), 0);
    converge(&m, &r, SETTLE, "after A's unlock on the new master");
    assert_eq!(unlock(&mut cr, "q", "Q"), 1);
    assert_eq!(unlock(&mut cr, "q", "Q"), 1);
    let d = converge(&m, &r, SETTLE, "after Q's unlocks");
    assert!(d.is_empty(), "every key went: {d:?}");

    // More keys, deleted later on the new master by unlock, hand-off and lapse.
    for i in 0..5 {
        wlock(&mut cr, &format!("later:{i}"), "X", LONG).unwrap();
    }
    wlock(&mut cr, "later:w", "X", LONG).unwrap();
    let w = send_timed(
        &r,
        0,
        &["RWLOCK.WLOCK", "later:w", "W", "60000", "WAIT", "0"],
    );
    await_waiters(&mut cr, "later:w", 1);
    wlock(&mut cr, "later:short", "X", 300).unwrap();
    converge(&m, &r, SETTLE, "later keys held");
    for i in 0..5 {
        assert_eq!(unlock(&mut cr, &format!("later:{i}"), "X"), 1);
    }
    assert_eq!(unlock(&mut cr, "later:w", "X"), 1);
    let (tw, _) = w.wait(Duration::from_secs(5));
    assert!(tw.expect("W").unwrap() > ta);
    assert_eq!(unlock(&mut cr, "later:w", "W"), 1);
    until(SETTLE, "later:short lapses", || {
        exists(&mut cr, "later:short") == 0
    });
    let d = converge(&m, &r, SETTLE, "after the later keys went");
    assert!(d.is_empty(), "every key went: {d:?}");
    assert_eq!(info_int(&mut cm, "lease", "lease_holders"), 0);
    assert_eq!(info_int(&mut cm, "lease", "lease_keys"), 0);
}

#[test]
fn failover_answers_waiters_and_the_demoted_master_equals_its_new_master() {
    demotion(failover);
}

#[test]
fn manual_demotion_answers_waiters_and_the_demoted_master_equals_its_new_master() {
    demotion(by_hand);
}

#[test]
fn a_writable_replica_refuses_lock_commands_and_its_timer_changes_nothing() {
    let (m, r) = pair();
    let mut cm = conn(&m);
    let mut cr = conn(&r);
    assert_eq!(
        text(&r!(cr, "CONFIG", "SET", "replica-read-only", "no")),
        "OK"
    );
    // The replica really is writable for ordinary keys.
    assert_eq!(text(&r!(cr, "SET", "plain", "v")), "OK");
    assert_eq!(int(&r!(cr, "DEL", "plain")), 1);
    wlock(&mut cm, "held", "H", LONG).unwrap();
    wlock(&mut cm, "short", "S", 600).unwrap();
    let deadline = lock_info(&mut cm, "short")
        .holder("S", "write")
        .unwrap()
        .deadline;
    sync(&m, &r);
    for args in [
        &["RWLOCK.WLOCK", "fresh", "x", "1000"][..],
        &["RWLOCK.WLOCK", "fresh", "x", "1000", "WAIT", "100"],
        &["RWLOCK.RLOCK", "fresh", "x", "1000"],
        &["RWLOCK.WLOCK", "held", "H", "1000"],
        &["RWLOCK.RENEW", "held", "H", "1000"],
        &["RWLOCK.UNLOCK", "held", "H"],
        &["LEADER.CAMPAIGN", "e", "x", "1000"],
        &["SEMAPHORE.ACQUIRE", "sem", "x", "2", "1000"],
    ] {
        let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let v = exec_args(&mut cr, &argv).expect("io");
        let e = err(&v);
        assert!(
            e.starts_with("READONLY"),
            "{args:?} on a writable replica: {e}"
        );
    }
    assert_eq!(exists(&mut cr, "fresh"), 0);
    // Freeze the master across short's lapse: the replica keeps it until told.
    signal(&m, "STOP");
    sleep_until(deadline, 500);
    let (h, n, l) = (
        info_int(&mut cr, "lease", "lease_holders"),
        dbsize(&mut cr),
        info_int(&mut cr, "lease", "lease_lapses"),
    );
    signal(&m, "CONT");
    assert_eq!((h, n, l), (2, 2, 0), "the replica changed state by itself");
    until(SETTLE, "short lapses on the master", || {
        exists(&mut cm, "short") == 0
    });
    let d = converge(&m, &r, SETTLE, "after the master's lapse");
    assert_eq!(d.keys().collect::<Vec<_>>(), ["held"]);
}

#[test]
fn demotion_answers_waiters_held_back_in_the_lobby() {
    let (m, r) = pair();
    let mut cm = conn(&m);
    let mut cr = conn(&r);
    let quarantine = 1500;
    assert_eq!(
        text(&r!(cr, "CONFIG", "SET", "lease.quarantine", quarantine)),
        "OK"
    );
    wlock(&mut cm, "k", "A", LONG).unwrap();
    sync(&m, &r);
    // R is promoted: in quarantine, new grants wait in the lobby.
    assert_eq!(text(&r!(cr, "REPLICAOF", "NO", "ONE")), "OK");
    let promoted = now_ms();
    assert!(info_int(&mut cr, "lease", "lease_quarantine_ms") > 0);
    let w = send_timed(&r, 0, &["RWLOCK.WLOCK", "fresh", "W", "1000", "WAIT", "0"]);
    let v = send_timed(&r, 0, &["RWLOCK.WLOCK", "k", "V", "1000", "WAIT", "0"]);
    until(Duration::from_secs(5), "two parked on R", || {
        info_int(&mut cr, "lease", "lease_waiters") == 2
    });
    assert!(info_int(&mut cr, "lease", "lease_lobby_waiters") >= 1);
    // And demoted again, before the quarantine ends.
    replicate_from(&r, &m);
    await_swapped(&r, &m, "REPLICAOF back");
    assert_unblocked(w, "W in the lobby");
    assert_unblocked(v, "V on k");
    assert_eq!(info_int(&mut cr, "lease", "lease_lobby_waiters"), 0);
    assert_eq!(info_int(&mut cr, "lease", "lease_waiters"), 0);
    // Nothing is granted on R when the quarantine would have ended.
    sleep_until(promoted + quarantine, 300);
    assert_eq!(exists(&mut cr, "fresh"), 0);
    let d = converge(&m, &r, SETTLE, "after the quarantine's end");
    assert_eq!(d.keys().collect::<Vec<_>>(), ["k"]);
    assert_eq!(lock_info(&mut cr, "k").owners(), ["A"]);
}

#[test]
fn a_replica_follows_swapdb_and_deletes_and_once_promoted_runs_the_lapses() {
    let (mut m, r) = pair();
    let mut cm = conn_db(&m, 0);
    let mut cr = conn_db(&r, 0);
    let mut cr1 = conn_db(&r, 1);
    for i in 0..20 {
        wlock(&mut cm, &format!("gone:{i}"), "G", LONG).unwrap();
    }
    let ttl = 1500;
    wlock(&mut cm, "k", "A", ttl).unwrap();
    let deadline = lock_info(&mut cm, "k")
        .holder("A", "write")
        .unwrap()
        .deadline;
    let keys: Vec<String> = (0..20).map(|i| format!("gone:{i}")).collect();
    let _: i64 = redis::cmd("DEL").arg(&keys[..10]).query(&mut cm).unwrap();
    let _: i64 = redis::cmd("UNLINK")
        .arg(&keys[10..])
        .query(&mut cm)
        .unwrap();
    assert_eq!(text(&r!(cm, "SWAPDB", 0, 1)), "OK");
    assert_eq!(
        info_int(&mut cm, "lease", "lease_indexed_keys"),
        1,
        "the master's index"
    );
    sync(&m, &r);
    assert_eq!((dbsize(&mut cr), dbsize(&mut cr1)), (0, 1));
    assert_eq!(
        info_int(&mut cr, "lease", "lease_indexed_keys"),
        1,
        "the replica's index: k only"
    );
    // The master dies before k's lapse; the replica takes over.
    m.kill9();
    assert_eq!(text(&r!(cr, "REPLICAOF", "NO", "ONE")), "OK");
    assert!(now_ms() < deadline - 200, "promotion took too long");
    let w = send_timed(&r, 1, &["RWLOCK.WLOCK", "k", "W", "300", "WAIT", "5000"]);
    let (reply, _) = w.wait(Duration::from_secs(6));
    assert!(
        reply.expect("W").is_some(),
        "W granted at A's lapse on the promoted replica"
    );
    let served = now_ms();
    assert!(
        served >= deadline - 50 && served < deadline + 500,
        "W served at {served}, A's lease ended at {deadline}"
    );
    until(Duration::from_secs(3), "W's lapse deletes k", || {
        dbsize(&mut cr1) == 0
    });
    until(Duration::from_secs(1), "an empty index", || {
        info_int(&mut cr, "lease", "lease_indexed_keys") == 0
            && info_int(&mut cr, "lease", "lease_scheduled_wakeups") == 0
    });
}

/// Issue 20, item 5: LEASE.EXEC on a writable replica answered as the other module commands
/// do (READONLY), so a fenced write never lands on the replica alone.
#[test]
fn a_writable_replica_refuses_lease_exec() {
    let (m, r) = pair();
    let mut cm = conn(&m);
    let mut cr = conn(&r);
    assert_eq!(
        text(&r!(cr, "CONFIG", "SET", "replica-read-only", "no")),
        "OK"
    );
    let t = wlock(&mut cm, "held", "H", LONG).unwrap();
    sync(&m, &r);
    let v = r!(cr, "LEASE.EXEC", "held", t, "SET", "fenced", "v");
    assert!(
        is_err(&v) && err(&v).starts_with("READONLY"),
        "LEASE.EXEC on a writable replica: {v:?}"
    );
    assert_eq!(
        exists(&mut cr, "fenced"),
        0,
        "the write landed on the replica"
    );
    // On the master it runs, and reaches the replica by replication.
    assert_eq!(
        text(&r!(cm, "LEASE.EXEC", "held", t, "SET", "fenced", "v")),
        "OK"
    );
    converge(&m, &r, SETTLE, "after the fenced write");
    assert_eq!(text(&r!(cr, "GET", "fenced")), "v");
}
