//! Memory (issue 11): maxmemory eviction under every policy never lets a second holder in
//! while an evicted lease could still run (volatile-* never picks a lock key: it has no TTL;
//! allkeys-* may, and then grants on the name are held back until the lease would have ended);
//! keys deleted while held give their memory back; and what a parked waiter costs.

use std::time::{Duration, Instant};

use redis::ConnectionLike;
use redis_lease_testkit::crowd::Crowd;
use redis_lease_testkit::prelude::*;
use redis_lease_testkit::timed::send_timed;
use redis_lease_testkit::usage::used_memory;

const LONG: u64 = 60_000;

// ---------------------------------------------------------------------------------------------
// Eviction

/// A's lease: long enough for the cache writes that make the server evict, short enough to
/// wait out.
const LEASE: u64 = 3000;
/// How long the cache writes may go on (then the checks need A's lease still running).
const FILL_FOR: Duration = Duration::from_millis(1500);
/// Small, with big values: a few hundred writes make the server evict (an empty server uses
/// about 1 MB).
const MAXMEMORY: &str = "4mb";
const VALUE: usize = 32 * 1024;

/// Cache writes (half with a TTL) until the server has evicted (or, under noeviction,
/// refused with OOM) and, under allkeys-*, until `k` itself went, or `FILL_FOR` ran out.
/// Answers (keys written, OOM replies).
fn fill(c: &mut Connection, policy: &str) -> (usize, usize) {
    let start = Instant::now();
    let evicted0 = info_int(c, "stats", "evicted_keys");
    let value = vec![b'x'; VALUE];
    let (mut written, mut oom) = (0, 0);
    while start.elapsed() < FILL_FOR {
        let mut p = redis::pipe();
        for i in written..written + 20 {
            let cmd = p.cmd("SET").arg(format!("cache:{i}")).arg(value.as_slice());
            if i % 2 == 0 {
                cmd.arg("EX").arg(600);
            }
        }
        // Raw replies: an OOM error is one of them, not a failed pipeline.
        let replies = c
            .req_packed_commands(&p.get_packed_pipeline(), 0, 20)
            .expect("cache writes");
        for v in &replies {
            match v {
                Value::Okay => {}
                Value::ServerError(e) if e.code() == "OOM" => oom += 1,
                other => panic!("SET under {policy}: {other:?}"),
            }
        }
        written += 20;
        let evicted = info_int(c, "stats", "evicted_keys") - evicted0;
        let done = match policy {
            "noeviction" => oom > 0,
            // Once OOM replies come, the keys with a TTL are all gone.
            p if p.starts_with("volatile") => evicted >= 50 || (evicted > 0 && oom > 0),
            _ => evicted >= 50 && exists(c, "k") == 0,
        };
        if done {
            break;
        }
    }
    (written, oom)
}

/// `waiter`: W waits on k (WAIT) from before the cache writes, so an evicted k has a waiter,
/// which must be served at A's lapse, not before, and not answered LOCKGONE.
fn eviction_case(policy: &str, waiter: bool) {
    let s = Server::with(
        Options::default()
            .arg("maxmemory", MAXMEMORY)
            .arg("maxmemory-policy", policy),
    );
    let mut c = conn(&s);
    let sent = Instant::now();
    let ta = wlock(&mut c, "k", "A", LEASE).unwrap();
    let earliest_end = sent + Duration::from_millis(LEASE);
    let mut w = waiter.then(|| {
        let w = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "W", "1000", "WAIT", "10000"]);
        await_waiters(&mut c, "k", 1);
        w
    });
    let (written, oom) = fill(&mut c, policy);
    let evicted = info_int(&mut c, "stats", "evicted_keys");
    // Free the memory again (a request on a full server under noeviction would be OOM).
    let names: Vec<String> = (0..written).map(|i| format!("cache:{i}")).collect();
    for chunk in names.chunks(500) {
        let _: i64 = redis::cmd("DEL").arg(chunk).query(&mut c).unwrap();
    }
    let k_evicted = exists(&mut c, "k") == 0;
    let lease = lease_info(&mut c);
    let lease_evictions: i64 = lease
        .get("lease_evictions")
        .map(|v| v.parse().unwrap())
        .unwrap_or(-1);
    println!(
        "{policy} (waiter: {waiter}): {written} cache writes, {evicted} evicted, {oom} OOM, lock key evicted: \
         {k_evicted}, lease_evictions {lease_evictions}"
    );
    match policy {
        "noeviction" => {
            assert!(oom > 0, "noeviction: writes never failed with OOM");
            assert_eq!(evicted, 0);
        }
        _ => assert!(
            evicted > 0,
            "{policy}: nothing evicted after {written} writes"
        ),
    }
    if policy == "noeviction" || policy.starts_with("volatile") {
        assert!(!k_evicted, "{policy} evicted the lock key (it has no TTL)");
    }
    if !k_evicted {
        let info = lock_info(&mut c, "k");
        assert_eq!(info.owners(), ["A"], "{policy}: {info:?}");
        assert_eq!(info.holders[0].token, ta);
        // No Redis TTL: what keeps volatile-* policies away from it.
        assert_eq!(
            int(&r!(c, "PTTL", "k")),
            -1,
            "{policy}: the lock key has a TTL"
        );
    }

    // A's lease still runs: B is refused, with or without WAIT until it ends.
    let asked = Instant::now();
    assert!(
        asked + Duration::from_millis(200) < earliest_end,
        "{policy}: the cache writes took too long to check during A's lease"
    );
    assert_eq!(
        wlock(&mut c, "k", "B", 1000),
        None,
        "{policy}: B granted during A's lease"
    );
    assert_eq!(
        rlock(&mut c, "k", "R", 1000),
        None,
        "{policy}: R granted during A's lease"
    );
    let b = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "B", "1000", "WAIT", "10000"]);
    if let Some(w) = w.as_mut() {
        w.assert_waiting_for(Duration::from_millis(0), "A's lease still runs");
    }
    if k_evicted && waiter {
        // Issue 20's first finding, on the eviction route: the waiters of the evicted lock
        // wait under its kind, so a request of another kind on the name is refused as it
        // would be with the key present, instead of joining them.
        for other in [
            &["LEADER.CAMPAIGN", "k", "E", "1000", "WAIT", "5000"][..],
            &["SEMAPHORE.ACQUIRE", "k", "S", "1", "1000", "WAIT", "5000"][..],
        ] {
            let mut cmd = redis::cmd(other[0]);
            for a in &other[1..] {
                cmd.arg(*a);
            }
            let answer = match cmd.query::<Value>(&mut c) {
                Ok(v) => format!("{v:?}"),
                Err(e) => e.to_string(),
            };
            assert!(
                answer.contains("WRONGTYPE"),
                "{policy}: {} on the evicted lock's name answered {answer}",
                other[0]
            );
        }
    }
    let ta = match w {
        // W, queued first, is served first, at A's lapse; B after W's release.
        Some(w) => {
            let (reply, at) = w.wait(Duration::from_secs(15));
            let tw = reply
                .unwrap_or_else(|e| panic!("{policy}: W: {e}"))
                .unwrap_or_else(|| panic!("{policy}: W never granted"));
            assert!(
                at >= earliest_end,
                "{policy}: W granted {:?} before A's lease could end",
                earliest_end - at
            );
            assert!(tw > ta, "{policy}: tokens {ta} then {tw}");
            let info = lock_info(&mut c, "k");
            assert_eq!(info.owners(), ["W"], "{policy}: one holder: {info:?}");
            assert_eq!(unlock(&mut c, "k", "W"), 1);
            tw
        }
        None => ta,
    };
    let (reply, at) = b.wait(Duration::from_secs(15));
    let tb = reply
        .unwrap_or_else(|e| panic!("{policy}: B: {e}"))
        .unwrap_or_else(|| panic!("{policy}: B never granted"));
    assert!(
        at >= earliest_end,
        "{policy}: B granted {:?} before A's lease could end",
        earliest_end - at
    );
    assert!(
        at < earliest_end + Duration::from_secs(2),
        "{policy}: B granted {:?} after A's lease ended",
        at - earliest_end
    );
    assert!(tb > ta, "{policy}: tokens {ta} then {tb}");
    let info = lock_info(&mut c, "k");
    assert_eq!(info.owners(), ["B"], "{policy}: one holder: {info:?}");
    assert_eq!(info.holders[0].token, tb);
    assert_eq!(unlock(&mut c, "k", "B"), 1);
    until(Duration::from_secs(2), "k gone", || {
        exists(&mut c, "k") == 0
    });

    // What the operator sees.
    if k_evicted {
        assert!(
            lease_evictions >= 1,
            "{policy}: lease_evictions {lease_evictions}"
        );
        assert!(
            s.log().contains("maxmemory evicted 'k'"),
            "{policy}: no warning in the log:\n{}",
            s.log()
        );
    } else {
        assert_eq!(lease_evictions, 0, "{policy}: lease_evictions");
    }
}

#[test]
fn eviction_noeviction() {
    eviction_case("noeviction", false);
}

#[test]
fn eviction_allkeys_lru() {
    eviction_case("allkeys-lru", false);
}

#[test]
fn eviction_allkeys_lfu() {
    eviction_case("allkeys-lfu", false);
}

#[test]
fn eviction_allkeys_random() {
    eviction_case("allkeys-random", false);
}

#[test]
fn eviction_volatile_lru() {
    eviction_case("volatile-lru", false);
}

#[test]
fn eviction_volatile_lfu() {
    eviction_case("volatile-lfu", false);
}

#[test]
fn eviction_volatile_random() {
    eviction_case("volatile-random", false);
}

#[test]
fn eviction_volatile_ttl() {
    eviction_case("volatile-ttl", false);
}

#[test]
fn eviction_with_a_waiter_allkeys_lru() {
    eviction_case("allkeys-lru", true);
}

#[test]
fn eviction_with_a_waiter_allkeys_lfu() {
    eviction_case("allkeys-lfu", true);
}

#[test]
fn eviction_with_a_waiter_allkeys_random() {
    eviction_case("allkeys-random", true);
}

#[test]
fn eviction_with_a_waiter_volatile_ttl() {
    eviction_case("volatile-ttl", true);
}

// ---------------------------------------------------------------------------------------------
// Memory of deleted keys and of parked waiters

/// `used_memory` once it stops moving (the server resizes its dicts in its cron): two readings
/// 300 ms apart within 16 KiB, or the last reading after 5 s.
fn settled_memory(c: &mut Connection) -> i64 {
    let mut last = used_memory(c);
    for _ in 0..16 {
        std::thread::sleep(Duration::from_millis(300));
        let now = used_memory(c);
        if (now - last).abs() < 16 * 1024 {
            return now;
        }
        last = now;
    }
    last
}

/// `n` held keys created and deleted (`how`: DEL, UNLINK or FLUSHALL), on a connection of
/// their own.
fn create_and_delete(s: &Server, n: usize, how: &str) {
    let mut c = conn(s);
    let names: Vec<String> = (0..n).map(|i| format!("m:{i}")).collect();
    for chunk in names.chunks(1000) {
        let mut p = redis::pipe();
        for k in chunk {
            p.cmd("RWLOCK.WLOCK").arg(k).arg("o").arg(600_000);
        }
        let t: Vec<Option<i64>> = p.query(&mut c).expect("pipelined WLOCKs");
        assert!(t.iter().all(Option::is_some));
    }
    assert_eq!(info_int(&mut c, "lease", "lease_keys"), n as i64);
    if how == "FLUSHALL" {
        assert_eq!(text(&r!(c, "FLUSHALL")), "OK");
    }
    for chunk in names.chunks(1000).filter(|_| how != "FLUSHALL") {
        let mut p = redis::pipe();
        for k in chunk {
            p.cmd(how).arg(k);
        }
        let d: Vec<i64> = p.query(&mut c).expect("pipelined deletes");
        assert!(d.iter().all(|&x| x == 1));
    }
    assert_eq!(dbsize(&mut c), 0);
}

#[test]
fn deleting_held_keys_gives_their_memory_back() {
    let s = Server::start();
    let mut c = conn(&s);
    let n = 100_000;
    // One round first: the server's and the module's tables reach their size.
    create_and_delete(&s, n, "DEL");
    let base = settled_memory(&mut c);
    for how in ["DEL", "UNLINK", "FLUSHALL"] {
        create_and_delete(&s, n, how);
    }
    let wakeups = info_int(&mut c, "lease", "lease_scheduled_wakeups");
    let after = settled_memory(&mut c);
    let growth = after - base;
    println!(
        "memory after 3 x {n} held keys deleted by DEL, UNLINK, FLUSHALL ({}): base {base} B, after {after} B, growth \
         {growth} B, lease_scheduled_wakeups {wakeups}",
        server_binary()
    );
    assert_eq!(wakeups, 0, "wake-ups of deleted keys are left");
    assert!(
        growth < 1024 * 1024,
        "used_memory grew by {growth} B over 3 rounds of {n} held keys created and deleted"
    );
}

#[test]
fn parked_waiter_memory() {
    let s = Server::start();
    let mut c = conn(&s);
    let n = 1000;
    wlock(&mut c, "k", "A", LONG).unwrap();
    let start = settled_memory(&mut c);
    let mut crowd = Crowd::connect(s.port, n);
    until(Duration::from_secs(10), "all connected", || {
        info_int(&mut c, "clients", "connected_clients") == n as i64 + 1
    });
    let connected = settled_memory(&mut c);
    crowd.send_each(|i| {
        ["RWLOCK.RLOCK", "k", &format!("w{i}"), "60000", "WAIT", "0"]
            .map(String::from)
            .to_vec()
    });
    await_waiters(&mut c, "k", n as i64);
    let peak = used_memory(&mut c);
    // Answer them all at once, leaving no holder whose memory would count.
    assert_eq!(text(&r!(c, "FLUSHALL")), "OK");
    let lines = crowd.first_lines(Duration::from_secs(10));
    assert!(
        lines.iter().all(|l| l.starts_with("-LOCKGONE")),
        "{:?}",
        &lines[..3]
    );
    assert_eq!(info_int(&mut c, "lease", "lease_waiters"), 0);
    let answered = settled_memory(&mut c);
    crowd.close();
    until(Duration::from_secs(10), "all disconnected", || {
        info_int(&mut c, "clients", "connected_clients") == 1
    });
    let closed = settled_memory(&mut c);
    let per = |a: i64, b: i64| (a - b) as f64 / n as f64 / 1024.0;
    println!(
        "parked waiter memory ({}, {n} waiters): an idle connection {:.1} KiB; parked: +{:.1} \
         KiB each at the peak (over the idle connections); answered, still connected: {:+.1} \
         KiB each against the start; closed: {:+.1} KiB each against the start",
        server_binary(),
        per(connected, start),
        per(peak, connected),
        per(answered, start),
        per(closed, start)
    );
    assert!(
        per(peak, connected) < 256.0,
        "a parked waiter costs {:.1} KiB",
        per(peak, connected)
    );
}

/// The master evicts a lock key with a live lease (allkeys-lru); the replica sees a DEL. Once
/// promoted (the master died), it must not let a second holder in while A's lease could run.
#[test]
fn a_promoted_replica_holds_back_grants_on_a_key_its_master_evicted() {
    let mut m = Server::with(
        debug_opts()
            .arg("maxmemory", MAXMEMORY)
            .arg("maxmemory-policy", "allkeys-lru"),
    );
    let r = start_replica(&m);
    sync(&m, &r);
    let mut cm = conn(&m);
    let sent = Instant::now();
    wlock(&mut cm, "k", "A", LEASE).unwrap();
    let earliest_end = sent + Duration::from_millis(LEASE);
    fill(&mut cm, "allkeys-lru");
    assert_eq!(exists(&mut cm, "k"), 0, "the master evicted k");
    sync(&m, &r);
    m.kill9();
    let mut cr = conn(&r);
    assert_eq!(text(&r!(cr, "REPLICAOF", "NO", "ONE")), "OK");
    assert!(
        Instant::now() + Duration::from_millis(200) < earliest_end,
        "too slow to check during A's lease"
    );
    assert_eq!(
        wlock(&mut cr, "k", "B", 1000),
        None,
        "B granted on the promoted replica during A's lease"
    );
    let b = send_timed(&r, 0, &["RWLOCK.WLOCK", "k", "B", "1000", "WAIT", "10000"]);
    let (reply, at) = b.wait(Duration::from_secs(15));
    assert!(reply.expect("B").is_some());
    assert!(
        at >= earliest_end,
        "B granted {:?} before A's lease could end",
        earliest_end - at
    );
}

/// The record of an evicted live lease outlives a DEBUG RELOAD and a restart from the RDB.
#[test]
fn an_evicted_lease_still_holds_back_grants_after_reload_and_restart() {
    let mut s = Server::with(
        debug_opts()
            .arg("maxmemory", MAXMEMORY)
            .arg("maxmemory-policy", "allkeys-lru"),
    );
    let mut c = conn(&s);
    let lease = 6000;
    let sent = Instant::now();
    wlock(&mut c, "k", "A", lease).unwrap();
    let earliest_end = sent + Duration::from_millis(lease);
    let (written, _) = fill(&mut c, "allkeys-lru");
    assert_eq!(exists(&mut c, "k"), 0, "k evicted");
    let names: Vec<String> = (0..written).map(|i| format!("cache:{i}")).collect();
    for chunk in names.chunks(500) {
        let _: i64 = redis::cmd("DEL").arg(chunk).query(&mut c).unwrap();
    }
    assert_eq!(wlock(&mut c, "k", "B", 1000), None, "B during A's lease");
    assert_eq!(text(&r!(c, "DEBUG", "RELOAD")), "OK");
    assert_eq!(
        wlock(&mut c, "k", "B", 1000),
        None,
        "B during A's lease, after DEBUG RELOAD"
    );
    s.shutdown(true);
    s.restart(None);
    let mut c = conn(&s);
    assert!(Instant::now() + Duration::from_millis(200) < earliest_end);
    assert_eq!(
        wlock(&mut c, "k", "B", 1000),
        None,
        "B during A's lease, after a restart"
    );
}

/// A waiter that leaves while held back in the lobby (its key was evicted) is never granted:
/// at the end of the evicted lease the next waiter gets the lock, and nobody else holds it.
#[test]
fn a_waiter_that_leaves_the_lobby_is_never_granted() {
    let s = Server::with(
        Options::default()
            .arg("maxmemory", MAXMEMORY)
            .arg("maxmemory-policy", "allkeys-lru"),
    );
    let mut c = conn(&s);
    let sent = Instant::now();
    wlock(&mut c, "k", "A", LEASE).unwrap();
    let earliest_end = sent + Duration::from_millis(LEASE);
    let mut gone = Crowd::connect(s.port, 1);
    gone.send_each(|_| {
        ["RWLOCK.WLOCK", "k", "GONE", "60000", "WAIT", "0"]
            .map(String::from)
            .to_vec()
    });
    await_waiters(&mut c, "k", 1);
    let v = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "V", "60000", "WAIT", "10000"]);
    await_waiters(&mut c, "k", 2);
    let (written, _) = fill(&mut c, "allkeys-lru");
    assert_eq!(exists(&mut c, "k"), 0, "k evicted");
    let names: Vec<String> = (0..written).map(|i| format!("cache:{i}")).collect();
    for chunk in names.chunks(500) {
        let _: i64 = redis::cmd("DEL").arg(chunk).query(&mut c).unwrap();
    }
    assert_eq!(info_int(&mut c, "lease", "lease_lobby_waiters"), 2);
    gone.close();
    until(Duration::from_secs(2), "the leaver left", || {
        info_int(&mut c, "lease", "lease_waiters") == 1
    });
    let (reply, at) = v.wait(Duration::from_secs(15));
    assert!(reply.expect("V").is_some(), "V granted");
    assert!(at >= earliest_end, "V granted before A's lease could end");
    assert_eq!(lock_info(&mut c, "k").owners(), ["V"]);
}

/// SWAPDB carries an evicted lease's hold-back and its lobby to the other db.
#[test]
fn swapdb_carries_an_evicted_lease_and_its_lobby() {
    let s = Server::with(
        Options::default()
            .arg("maxmemory", MAXMEMORY)
            .arg("maxmemory-policy", "allkeys-lru"),
    );
    let (mut c0, mut c1) = (conn_db(&s, 0), conn_db(&s, 1));
    let sent = Instant::now();
    let ta = wlock(&mut c0, "k", "A", LEASE).unwrap();
    let earliest_end = sent + Duration::from_millis(LEASE);
    let w = send_timed(&s, 0, &["RWLOCK.WLOCK", "k", "W", "60000", "WAIT", "10000"]);
    await_waiters(&mut c0, "k", 1);
    let (written, _) = fill(&mut c0, "allkeys-lru");
    assert_eq!(exists(&mut c0, "k"), 0, "k evicted");
    let names: Vec<String> = (0..written).map(|i| format!("cache:{i}")).collect();
    for chunk in names.chunks(500) {
        let _: i64 = redis::cmd("DEL").arg(chunk).query(&mut c0).unwrap();
    }
    assert_eq!(text(&r!(c0, "SWAPDB", 0, 1)), "OK");
    // db 1 has what db 0 had: A's lease may still run there.
    assert_eq!(
        wlock(&mut c1, "k", "B", 1000),
        None,
        "B in db 1 during A's lease"
    );
    // db 0 is the old (empty) db 1: free.
    let t0 = wlock(&mut c0, "k", "Z", LONG).expect("Z in db 0");
    assert!(t0 > ta);
    let (reply, at) = w.wait(Duration::from_secs(15));
    assert!(reply.expect("W").is_some(), "W granted");
    assert!(at >= earliest_end, "W granted before A's lease could end");
    assert_eq!(lock_info(&mut c1, "k").owners(), ["W"], "W holds k in db 1");
    assert_eq!(lock_info(&mut c0, "k").owners(), ["Z"], "Z holds k in db 0");
}
