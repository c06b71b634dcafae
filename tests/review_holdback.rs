//! An adversarial review of the hold-back (issue 20) over raw sockets: side paths around the
//! lobby and the quarantine, each checked for a reply that comes late, twice, or disagrees
//! with the state.

use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

fn waiters(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_waiters")
}

fn left(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_quarantine_ms")
}

/// A request parked behind a holder the server knew before a quarantine is served when the
/// quarantine ends, not at the holder's lapse or its own deadline.
#[test]
fn a_waiter_behind_a_known_holder_is_served_when_the_quarantine_ends() {
    for how in ["ends by itself", "CONFIG SET 0"] {
        let s = Server::with(debug_opts());
        let mut c = conn(&s);
        // Leases that outlast the quarantine, taken before it is configured.
        token(&r!(c, "RWLOCK.RLOCK", "k", "a", 12000));
        token(&r!(c, "SEMAPHORE.ACQUIRE", "s", "a", 3, 12000));
        r!(c, "CONFIG", "SET", "lease.quarantine", "2000");
        r!(c, "DEBUG", "RELOAD");
        assert!(left(&mut c) > 0, "the reload quarantines");
        let mut r = Sock::connect(s.port);
        r.send_text(&["RWLOCK.RLOCK", "k", "b", "1000", "WAIT", "9000"]);
        let mut m = Sock::connect(s.port);
        m.send_text(&["SEMAPHORE.ACQUIRE", "s", "b", "3", "1000", "WAIT", "9000"]);
        until(Duration::from_secs(5), "both park", || waiters(&mut c) == 2);
        let t = Instant::now();
        if how == "CONFIG SET 0" {
            r!(c, "CONFIG", "SET", "lease.quarantine", "0");
        }
        for (what, w) in [("reader", &mut r), ("semaphore", &mut m)] {
            let rep = w
                .try_reply(Duration::from_secs(5))
                .unwrap()
                .unwrap_or_else(|| {
                    panic!(
                        "{how}: the {what} still waits {:?} after the quarantine",
                        t.elapsed()
                    )
                });
            assert!(
                rep.int() > 0,
                "{how}: {what}: {rep:?} after {:?}",
                t.elapsed()
            );
        }
    }
}

/// Shortening a running quarantine must not put off a parked request's own deadline: a lobby
/// waiter whose WAIT ends before the new end is still answered (nil) at its deadline.
#[test]
fn shortening_the_quarantine_keeps_each_waiters_deadline() {
    let s = Server::with(debug_opts().module_arg("quarantine", "30000"));
    let mut c = conn(&s);
    let mut w = Sock::connect(s.port);
    let sent = Instant::now();
    w.send_text(&["RWLOCK.WLOCK", "k", "w", "1000", "WAIT", "2000"]);
    until(Duration::from_secs(5), "the waiter parks", || {
        info_int(&mut c, "lease", "lease_lobby_waiters") == 1
    });
    r!(c, "CONFIG", "SET", "lease.quarantine", "15000");
    let r = w
        .try_reply(Duration::from_secs(6))
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "a WAIT 2000 still unanswered {:?} after it was sent",
                sent.elapsed()
            )
        });
    assert!(r.is_nil(), "{r:?}");
    let late = sent.elapsed();
    assert!(
        late < Duration::from_millis(4500),
        "answered {late:?} after a WAIT 2000"
    );
}

/// COMMANDS.md: `CONFIG SET lease.quarantine n` makes a running quarantine last `n` ms from
/// its start, higher as well as lower.
#[test]
fn raising_the_quarantine_lengthens_a_running_one() {
    let s = Server::with(debug_opts().module_arg("quarantine", "3000"));
    let mut c = conn(&s);
    r!(c, "CONFIG", "SET", "lease.quarantine", "20000");
    let ms = left(&mut c);
    assert!(
        ms > 15_000,
        "lease_quarantine_ms {ms} after raising it to 20000"
    );
    std::thread::sleep(Duration::from_millis(3500));
    assert!(
        is_nil(&r!(c, "RWLOCK.WLOCK", "k", "a", 1000)),
        "still held back"
    );
}

fn lobby(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_lobby_waiters")
}

fn park(s: &Server, c: &mut Connection, args: &[&str], n: i64) -> Sock {
    let mut w = Sock::connect(s.port);
    w.send_text(args);
    until(Duration::from_secs(10), "the request parks", || {
        lobby(c) == n
    });
    w
}

/// Nothing more arrives on `w` for a while (no second answer).
fn silent(w: &mut Sock, what: &str) {
    let more = w.try_reply(Duration::from_millis(600)).unwrap();
    assert!(more.is_none(), "{what}: a second answer {more:?}");
}

/// A WAIT inside MULTI or a script cannot block: answered at once, nothing left in the lobby,
/// nothing granted later to a request nobody waits for.
#[test]
fn a_wait_in_a_transaction_or_script_during_the_quarantine_leaves_nothing_behind() {
    let s = Server::with(debug_opts().module_arg("quarantine", "2000"));
    let mut c = conn(&s);
    let mut t = Sock::connect(s.port);
    t.cmd(&["MULTI"]);
    t.cmd(&["RWLOCK.WLOCK", "k", "m", "1000", "WAIT", "5000"]);
    t.cmd(&["SEMAPHORE.ACQUIRE", "s", "m", "2", "1000", "WAIT", "5000"]);
    let out = t.cmd(&["EXEC"]);
    assert!(out.array().iter().all(|r| r.is_nil()), "{out:?}");
    let out = t.cmd(&[
        "EVAL",
        "return redis.pcall('LEADER.CAMPAIGN', KEYS[1], 'l', 1000, 'WAIT', 5000)",
        "1",
        "e",
    ]);
    assert!(out.is_nil(), "{out:?}");
    assert_eq!(lobby(&mut c), 0);
    assert_eq!(info_int(&mut c, "lease", "lease_waiters"), 0);
    until(Duration::from_secs(6), "the quarantine ends", || {
        left(&mut c) == 0
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        dbsize(&mut c),
        0,
        "nothing granted to a request nobody waits for"
    );
    token(&r!(c, "RWLOCK.WLOCK", "k", "x", 1000));
}

/// FLUSHALL and DEBUG RELOAD while requests wait in the lobby: each is answered once, by the
/// rules (served when grants open), never twice.
#[test]
fn flushall_and_reload_leave_the_lobby_to_its_rules() {
    for how in ["FLUSHALL", "FLUSHALL ASYNC", "DEBUG RELOAD", "FLUSHDB"] {
        let s = Server::with(debug_opts().module_arg("quarantine", "2500"));
        let mut c = conn(&s);
        let mut w1 = park(
            &s,
            &mut c,
            &["RWLOCK.WLOCK", "k", "w1", "1000", "WAIT", "9000"],
            1,
        );
        let mut w2 = park(
            &s,
            &mut c,
            &["RWLOCK.WLOCK", "k", "w2", "1000", "WAIT", "9000"],
            2,
        );
        let args: Vec<&str> = how.split(' ').collect();
        let r: Value = redis::cmd(args[0])
            .arg(&args[1..])
            .query(&mut conn(&s))
            .unwrap();
        assert!(!is_err(&r), "{how}: {r:?}");
        let a = w1
            .try_reply(Duration::from_secs(8))
            .unwrap()
            .expect("w1 answered");
        assert!(a.int() > 0, "{how}: w1 {a:?}");
        silent(&mut w1, how);
        assert!(
            w2.try_reply(Duration::from_millis(300)).unwrap().is_none(),
            "{how}: w2 behind w1"
        );
        assert_eq!(unlock(&mut c, "k", "w1"), 1, "{how}");
        let b = w2.reply_within(Duration::from_secs(3), "w2");
        assert!(b.int() > a.int(), "{how}: {a:?} then {b:?}");
        silent(&mut w2, how);
    }
}

/// A demotion while requests wait in the lobby: each answered once (an error), the lobby gone;
/// promoted again, the name starts afresh.
#[test]
fn a_demotion_sends_the_lobby_away_once() {
    let m = Server::with(debug_opts());
    let s = Server::with(debug_opts().module_arg("quarantine", "20000"));
    let mut c = conn(&s);
    let mut w = park(
        &s,
        &mut c,
        &["SEMAPHORE.ACQUIRE", "k", "a", "2", "1000", "WAIT", "15000"],
        1,
    );
    r!(c, "REPLICAOF", "127.0.0.1", m.port);
    // Redis itself unblocks its blocked clients on a demotion and closes them (UNBLOCKED, or
    // nothing before the close): never a grant, never two answers.
    match w.try_reply(Duration::from_secs(5)) {
        Err(closed) => assert!(closed.contains("closed"), "{closed}"),
        Ok(r) => {
            let r = r.expect("the lobby waiter answered on a demotion");
            assert!(!r.err().is_empty(), "{r:?}");
            assert!(w
                .try_reply(Duration::from_millis(600))
                .map_or(true, |m| m.is_none()));
        }
    }
    assert_eq!(lobby(&mut c), 0);
    r!(c, "REPLICAOF", "NO", "ONE");
    r!(c, "CONFIG", "SET", "lease.quarantine", "0");
    // Another kind on the same name now: no trace of the old lobby.
    token(&r!(c, "RWLOCK.WLOCK", "k", "x", 1000));
}

/// A string written at a held-back name: its waiter is still answered by its deadline.
#[test]
fn a_string_at_a_held_back_name_does_not_keep_its_waiter() {
    let s = Server::with(debug_opts().module_arg("quarantine", "20000"));
    let mut c = conn(&s);
    let sent = Instant::now();
    let mut w = park(
        &s,
        &mut c,
        &["RWLOCK.WLOCK", "k", "w", "1000", "WAIT", "2000"],
        1,
    );
    r!(c, "SET", "k", "v");
    let r = w.reply_within(
        Duration::from_secs(6),
        "the waiter of a name that became a string",
    );
    assert!(r.is_nil() || r.err().starts_with("WRONGTYPE"), "{r:?}");
    assert!(
        sent.elapsed() < Duration::from_millis(4500),
        "{:?}",
        sent.elapsed()
    );
    silent(&mut w, "string");
    assert_eq!(text(&r!(c, "GET", "k")), "v");
    assert_eq!(lobby(&mut c), 0);
}

/// Clients that leave the lobby: the next in arrival order is served, the departed never.
#[test]
fn departed_lobby_waiters_are_skipped() {
    let s = Server::with(debug_opts().module_arg("quarantine", "2500"));
    let mut c = conn(&s);
    let w1 = park(
        &s,
        &mut c,
        &["LEADER.CAMPAIGN", "e", "c1", "1000", "WAIT", "9000"],
        1,
    );
    let mut w2 = park(
        &s,
        &mut c,
        &["LEADER.CAMPAIGN", "e", "c2", "1000", "WAIT", "9000"],
        2,
    );
    let mut w3 = park(
        &s,
        &mut c,
        &["LEADER.CAMPAIGN", "e", "c3", "1000", "WAIT", "9000"],
        3,
    );
    drop(w1);
    until(Duration::from_secs(5), "c1 leaves", || lobby(&mut c) == 2);
    let a = w2.reply_within(Duration::from_secs(8), "c2");
    assert!(a.int() > 0, "{a:?}");
    assert!(
        w3.try_reply(Duration::from_millis(300)).unwrap().is_none(),
        "one leader"
    );
    let cur = r!(c, "LEADER.CURRENT", "e");
    assert!(format!("{cur:?}").contains("c2"), "{cur:?}");
    assert_eq!(resign(&mut c, "e", "c2"), 1);
    let b = w3.reply_within(Duration::from_secs(3), "c3");
    assert!(b.int() > a.int(), "{a:?} {b:?}");
}

/// The stall bound at the default hz (a second): a block just under it is no stall, whatever
/// comes next; one past it quarantines before the next grant.
#[test]
fn debug_sleep_just_under_and_over_the_stall_bound() {
    let s = Server::with(debug_opts().module_arg("quarantine", "1500"));
    let mut c = conn(&s);
    until(Duration::from_secs(10), "the start quarantine", || {
        left(&mut c) == 0
    });
    for i in 0..3 {
        r!(c, "DEBUG", "SLEEP", "0.7");
        token(&r!(c, "RWLOCK.WLOCK", format!("u{i}"), "a", 1000));
    }
    assert_eq!(info_int(&mut c, "lease", "lease_stalls"), 0);
    let mut raw = Sock::connect(s.port);
    raw.cmd(&["DEBUG", "SLEEP", "1.4"]);
    let r = raw.cmd(&["RWLOCK.WLOCK", "o", "a", "1000"]);
    assert!(r.is_nil(), "granted right after a 1.4 s block: {r:?}");
    assert_eq!(info_int(&mut c, "lease", "lease_stalls"), 1);
}

/// SIGSTOP past the stall bound while a request waits in the lobby, its deadline passing
/// meanwhile: answered once (nil) as the server resumes, and the quarantine starts again.
#[test]
fn a_stop_past_the_bound_with_a_lobby_answers_its_waiter_once() {
    let s = Server::with(debug_opts().module_arg("quarantine", "3000"));
    let mut c = conn(&s);
    let mut w = park(
        &s,
        &mut c,
        &["RWLOCK.WLOCK", "k", "w", "1000", "WAIT", "1000"],
        1,
    );
    signal(&s, "STOP");
    std::thread::sleep(Duration::from_millis(2500));
    signal(&s, "CONT");
    let resumed = Instant::now();
    let r = w.reply_within(Duration::from_secs(5), "the lobby waiter after SIGCONT");
    let late = resumed.elapsed();
    // Its deadline passed while the server was stopped: answered as it resumes, not when the
    // new quarantine ends (the stall's quarantine re-armed the module's timer past it).
    assert!(
        late < Duration::from_millis(1500),
        "answered {late:?} after SIGCONT"
    );
    assert!(r.is_nil(), "{r:?}");
    silent(&mut w, "after SIGCONT");
    assert!(info_int(&mut c, "lease", "lease_stalls") >= 1);
    let l = left(&mut c);
    assert!(l > 1000, "quarantined again on resuming: {l} ms left");
    assert!(is_nil(&r!(c, "RWLOCK.WLOCK", "k", "x", 1000)));
    assert_eq!(lobby(&mut c), 0);
}
