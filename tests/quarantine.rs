//! `lease.quarantine`: after a server starts (and loads its data) or becomes a master, it makes
//! no new grant for that long; holds it knows of keep working; waiters stay parked in arrival
//! order and are served when it ends; a request without WAIT answers nil; a ttl above the
//! quarantine is an error while one is configured. docs/COMMANDS.md, "Names an operator sees".

use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

/// The quarantine the tests configure: long enough to observe, short enough for CI.
const Q: u64 = 1_500;

fn quarantined() -> Options {
    debug_opts().module_arg("quarantine", &Q.to_string())
}

fn left(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_quarantine_ms")
}

#[test]
fn a_server_that_starts_makes_no_new_grant_until_the_quarantine_ends() {
    let s = Server::with(quarantined());
    let started = Instant::now();
    let mut c = conn(&s);
    let ms = left(&mut c);
    assert!(ms > 0 && ms <= Q as i64, "lease_quarantine_ms {ms}");
    // Without WAIT: nil, and nothing is left behind.
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k", "a", 1000)));
    assert!(is_nil(&r!(c, "LEADER.CAMPAIGN", "e", "a", 1000)));
    assert!(is_nil(&r!(c, "SEMAPHORE.ACQUIRE", "s", "a", 2, 1000)));
    assert_eq!(dbsize(&mut c), 0);
    // With WAIT: parked in arrival order, served when the quarantine ends.
    let w1 = spawn_wait(&s, &["RWLOCK.RLOCK", "k", "r1", "1000", "WAIT", "10000"]);
    await_lease_waiters(&mut c, 1);
    let w2 = spawn_wait(&s, &["RWLOCK.WLOCK", "k", "w", "1000", "WAIT", "10000"]);
    await_lease_waiters(&mut c, 2);
    let w3 = spawn_wait(&s, &["RWLOCK.RLOCK", "k", "r2", "1000", "WAIT", "10000"]);
    await_lease_waiters(&mut c, 3);
    // A name whose only holders are waiters has no key meanwhile: the keyspace is what a
    // replica or the AOF would see.
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(info_int(&mut c, "lease", "lease_lobby_waiters"), 3);
    assert_eq!(
        lock_info(&mut c, "k").waiters,
        3,
        "INFO counts the parked waiters"
    );
    let t1 = w1.join().unwrap().unwrap().expect("r1 granted");
    let granted_after = started.elapsed();
    assert!(
        granted_after >= Duration::from_millis(Q - 200),
        "granted {granted_after:?} after the start, inside the quarantine"
    );
    assert!(left(&mut c) == 0);
    // w waits for r1; r2 arrived after w, so it waits behind it.
    let i = lock_info(&mut c, "k");
    assert_eq!(i.owners(), ["r1"], "{i:?}");
    assert_eq!(i.waiters, 2);
    assert_eq!(unlock(&mut c, "k", "r1"), 1);
    let t2 = w2.join().unwrap().unwrap().expect("w granted");
    assert_eq!(unlock(&mut c, "k", "w"), 1);
    let t3 = w3.join().unwrap().unwrap().expect("r2 granted");
    assert!(t1 < t2 && t2 < t3);
    // And grants are open now.
    token(&r!(c, "RWLOCK.WLOCK", "fresh", "a", 1000));
}

#[test]
fn a_ttl_above_the_quarantine_is_an_error() {
    let s = Server::with(quarantined());
    let mut c = conn(&s);
    let long = (Q + 1).to_string();
    for args in [
        vec!["RWLOCK.WLOCK", "k", "a", &long],
        vec!["LEADER.CAMPAIGN", "e", "a", &long],
        vec!["RWLOCK.RENEW", "k", "a", &long],
    ] {
        let v = exec_args(
            &mut c,
            &args
                .iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let e = err(&v);
        assert!(e.contains("quarantine"), "{args:?}: {e}");
    }
    // lease.quarantine 0 switches it off: long leases are fine again.
    r!(c, "CONFIG", "SET", "lease.quarantine", "0");
    assert!(!is_err(&r!(c, "RWLOCK.WLOCK", "k", "a", &long)));
}

#[test]
fn a_promoted_replica_keeps_the_holds_it_knows_and_holds_back_new_grants() {
    let master = debug_server();
    let replica = Server::with(quarantined());
    replicate_from(&replica, &master);
    let mut m = conn(&master);
    let mut r = conn(&replica);
    // The replica's own start quarantine passes while it syncs.
    until(
        Duration::from_secs(10),
        "the replica's start quarantine",
        || left(&mut r) == 0,
    );
    let t = token(&r!(m, "RWLOCK.WLOCK", "held", "a", 1_400));
    token(&r!(m, "LEADER.CAMPAIGN", "el", "leader", 1_400));
    token(&r!(m, "RWLOCK.RLOCK", "reader", "x", 1_400));
    sync(&master, &replica);
    assert_eq!(text(&r!(r, "REPLICAOF", "NO", "ONE")), "OK");
    let promoted = Instant::now();
    assert!(left(&mut r) > 0, "the promotion starts a quarantine");
    // Holds it knows of keep working: renew, reentrant grant, release, resign.
    assert_eq!(renew(&mut r, "held", "a", 1_400), Some(t));
    assert_eq!(
        wlock(&mut r, "held", "a", 1_400),
        Some(t),
        "reentrant grant"
    );
    let term = leader(&mut r, "el").expect("a leader").term;
    assert_eq!(
        int(&r!(r, "LEADER.CAMPAIGN", "el", "leader", 1_000)),
        term,
        "a re-campaign renews"
    );
    assert_eq!(resign(&mut r, "el", "leader"), 1);
    assert!(leader(&mut r, "el").is_none());
    assert_eq!(unlock(&mut r, "reader", "x"), 1);
    assert_eq!(exists(&mut r, "reader"), 0);
    // New holders are not granted, whatever the key's state.
    assert!(is_nil(&r!(r, "RWLOCK.RLOCK", "reader", "y", 1000)));
    assert!(is_nil(&r!(r, "RWLOCK.WLOCK", "new", "b", 1000)));
    // A waiter queues behind the known holder and is served after the quarantine, even
    // though the holder released inside it.
    let w = spawn_wait(
        &replica,
        &["RWLOCK.WLOCK", "held", "b", "1000", "WAIT", "10000"],
    );
    await_lease_waiters(&mut r, 1);
    assert_eq!(unlock(&mut r, "held", "a"), 1);
    assert_eq!(unlock(&mut r, "held", "a"), 1);
    let tb = w.join().unwrap().unwrap().expect("b granted");
    assert!(tb > t);
    assert!(
        promoted.elapsed() >= Duration::from_millis(Q - 200),
        "granted {:?} after the promotion",
        promoted.elapsed()
    );
}

#[test]
fn quarantine_starts_again_after_loading_data() {
    let mut s = Server::with(quarantined().arg("appendonly", "yes"));
    let mut c = conn(&s);
    until(Duration::from_secs(5), "the start quarantine", || {
        left(&mut c) == 0
    });
    let t = token(&r!(c, "RWLOCK.WLOCK", "k", "a", 1_400));
    wait_persistence_idle(&mut c);
    s.kill9();
    s.restart(None);
    let mut c = conn(&s);
    assert!(
        left(&mut c) > 0,
        "a restart loads the AOF and starts a quarantine"
    );
    // The hold it loaded is known: it renews; a new holder waits.
    assert_eq!(renew(&mut c, "k", "a", 1_400), Some(t));
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k2", "b", 1000)));
}

/// Waits for the start quarantine to pass.
fn open_grants(c: &mut Connection) {
    until(Duration::from_secs(10), "the start quarantine", || {
        left(c) == 0
    });
}

#[test]
fn a_master_that_was_stopped_quarantines_again_before_its_first_request_after_resuming() {
    // A longer quarantine, so the hold taken before the stop outlives the stop.
    let q = 3_000;
    let s = Server::with(debug_opts().module_arg("quarantine", &q.to_string()));
    let mut c = conn(&s);
    open_grants(&mut c);
    let t = token(&r!(c, "RWLOCK.WLOCK", "held", "a", q));
    assert_eq!(info_int(&mut c, "lease", "lease_stalls"), 0);
    // Stopped past the stall bound (as by SIGSTOP, or a paused VM) while a client's request
    // waits in its socket: a replica may have been promoted meanwhile, and that request may
    // come from a client of this old master.
    let mut raw = Sock::connect(s.port);
    // Accepted before the stop, so the server reads it as soon as it runs.
    assert_eq!(raw.cmd(&["PING"]).bytes(), b"PONG");
    signal(&s, "STOP");
    std::thread::sleep(Duration::from_millis(1_600));
    raw.send(&[b"RWLOCK.WLOCK", b"fresh", b"b", b"1000"]);
    raw.send(&[b"RWLOCK.RENEW", b"held", b"a", b"1000"]);
    signal(&s, "CONT");
    assert!(
        raw.reply("the first WLOCK after the stop").is_nil(),
        "no new grant right after the stop"
    );
    // A hold the server knows of keeps working.
    assert!(raw.reply("RENEW of the known hold").int() > 0);
    assert_eq!(info_int(&mut c, "lease", "lease_stalls"), 1);
    assert!(left(&mut c) > 0, "the stall started a quarantine");
    assert_eq!(lock_info(&mut c, "held").owners(), ["a"]);
    assert_eq!(exists(&mut c, "fresh"), 0);
    // It ends like any quarantine, and grants are open again.
    open_grants(&mut c);
    assert!(token(&r!(c, "RWLOCK.WLOCK", "fresh", "b", 1000)) > t);
}

#[test]
fn a_grant_decided_right_after_a_long_block_is_held_back_before_the_cron_runs() {
    let s = Server::with(quarantined());
    let mut c = conn(&s);
    open_grants(&mut c);
    // A transaction blocks the server past the stall bound, then asks for a grant: no cron
    // runs in between (nor does after a paused VM resumes, or a clock step), so only the
    // check made with the request itself can hold the grant back.
    let mut raw = Sock::connect(s.port);
    assert_eq!(raw.cmd(&["MULTI"]).bytes(), b"OK");
    raw.cmd(&["DEBUG", "SLEEP", "1.3"]);
    raw.cmd(&["RWLOCK.WLOCK", "k", "a", "1000"]);
    let out = raw.cmd(&["EXEC"]);
    assert_eq!(out.array().len(), 2, "{out:?}");
    assert!(
        out.array()[1].is_nil(),
        "no new grant right after the block: {out:?}"
    );
    assert_eq!(info_int(&mut c, "lease", "lease_stalls"), 1);
    assert!(left(&mut c) > 0);
    assert_eq!(exists(&mut c, "k"), 0);
}

#[test]
fn a_stall_found_by_the_cron_quarantines_too_and_short_pauses_do_not() {
    let s = Server::with(quarantined());
    let mut c = conn(&s);
    open_grants(&mut c);
    // A pause below the bound (a second) is not a stall.
    signal(&s, "STOP");
    std::thread::sleep(Duration::from_millis(300));
    signal(&s, "CONT");
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(info_int(&mut c, "lease", "lease_stalls"), 0);
    assert_eq!(left(&mut c), 0);
    // No request comes after this stop: the cron finds it.
    signal(&s, "STOP");
    std::thread::sleep(Duration::from_millis(1_600));
    signal(&s, "CONT");
    until(Duration::from_secs(5), "the cron finds the stall", || {
        info_int(&mut c, "lease", "lease_stalls") == 1
    });
    assert!(left(&mut c) > 0);
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k", "a", 1000)));
}

#[test]
fn without_a_quarantine_a_stall_is_counted_and_grants_stay_open() {
    let s = debug_server();
    let mut c = conn(&s);
    signal(&s, "STOP");
    std::thread::sleep(Duration::from_millis(1_600));
    signal(&s, "CONT");
    until(Duration::from_secs(5), "the cron finds the stall", || {
        info_int(&mut c, "lease", "lease_stalls") == 1
    });
    assert_eq!(left(&mut c), 0);
    token(&r!(c, "RWLOCK.WLOCK", "k", "a", 1000));
}

/// Issue 20, item 9: `CONFIG SET lease.quarantine 0` ends a running quarantine at once (its
/// waiters are served, new grants are made); a lower value shortens it to that long from its
/// start.
#[test]
fn setting_the_quarantine_to_zero_ends_a_running_one() {
    let s = Server::with(debug_opts().module_arg("quarantine", "30000"));
    let mut c = conn(&s);
    assert!(left(&mut c) > 20_000);
    let mut w = Sock::connect(s.port);
    w.send(&[b"RWLOCK.WLOCK", b"k", b"w", b"1000", b"WAIT", b"20000"]);
    until(Duration::from_secs(10), "the waiter parks", || {
        info_int(&mut c, "lease", "lease_lobby_waiters") == 1
    });
    let set = Instant::now();
    r!(c, "CONFIG", "SET", "lease.quarantine", "0");
    assert_eq!(left(&mut c), 0, "the quarantine ended");
    let r = w
        .try_reply(Duration::from_secs(3))
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "the waiter still waits {:?} after the quarantine ended",
                set.elapsed()
            )
        });
    assert!(r.int() > 0, "{r:?}");
    token(&r!(c, "RWLOCK.WLOCK", "fresh", "a", 1000));

    // Lowering it: the quarantine lasts the new value from its start.
    let s = Server::with(debug_opts().module_arg("quarantine", "30000"));
    let mut c = conn(&s);
    let started = Instant::now();
    r!(c, "CONFIG", "SET", "lease.quarantine", "2000");
    let ms = left(&mut c);
    assert!(
        ms <= 2000,
        "lease_quarantine_ms {ms} after lowering it to 2000"
    );
    until(
        Duration::from_secs(5),
        "the shortened quarantine ends",
        || left(&mut c) == 0,
    );
    assert!(started.elapsed() < Duration::from_millis(2500));
    token(&r!(c, "RWLOCK.WLOCK", "fresh", "a", 1000));
}
