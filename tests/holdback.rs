//! The hold-back lobby (issue 20, findings 1-4): while grants are held back (a quarantine), a
//! name with waiters and no key keeps the core's state of the name, so requests there meet the
//! same rules as with the key present: another kind is WRONGTYPE, another semaphore limit is
//! refused, `lease.max-waiters` holds, and a key that arrives at the name (RESTORE, RENAME,
//! COPY, MOVE) takes the parked requests in, each answered at its own deadline. Raw sockets,
//! so no client retry can hide a lost or late reply.

use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

/// A quarantine longer than any of these tests: grants stay held back throughout.
const Q: u64 = 20_000;

fn quarantined() -> Server {
    Server::with(debug_opts().module_arg("quarantine", &Q.to_string()))
}

fn lobby(c: &mut Connection) -> i64 {
    info_int(c, "lease", "lease_lobby_waiters")
}

/// Sends a request that should park; waits until the lobby counts `n` waiters.
fn park(s: &Server, c: &mut Connection, args: &[&str], n: i64) -> Sock {
    let mut w = Sock::connect(s.port);
    w.send_text(args);
    until(Duration::from_secs(10), "the request parks", || {
        lobby(c) == n
    });
    w
}

/// The reply to a request that must be answered at once (not parked).
fn at_once(s: &Server, args: &[&str]) -> Resp {
    let mut w = Sock::connect(s.port);
    w.send_text(args);
    w.try_reply(Duration::from_secs(3))
        .unwrap()
        .unwrap_or_else(|| panic!("{args:?} was parked instead of answered"))
}

#[test]
fn kinds_do_not_mix_in_the_lobby() {
    let s = quarantined();
    let mut c = conn(&s);
    let _sem = park(
        &s,
        &mut c,
        &["SEMAPHORE.ACQUIRE", "k", "s1", "5", "1000", "WAIT", "15000"],
        1,
    );
    for args in [
        ["RWLOCK.WLOCK", "k", "w1", "1000", "WAIT", "15000"],
        ["RWLOCK.RLOCK", "k", "r1", "1000", "WAIT", "15000"],
        ["LEADER.CAMPAIGN", "k", "l1", "1000", "WAIT", "15000"],
    ] {
        let r = at_once(&s, &args);
        assert!(r.err().starts_with("WRONGTYPE"), "{args:?}: {r:?}");
    }
    // Without WAIT too, and the holder commands.
    let r = at_once(&s, &["RWLOCK.WLOCK", "k", "w2", "1000"]);
    assert!(r.err().starts_with("WRONGTYPE"), "{r:?}");
    let r = at_once(&s, &["LEADER.CURRENT", "k"]);
    assert!(
        r.is_nil() || r.err().starts_with("WRONGTYPE"),
        "CURRENT on a semaphore name: {r:?}"
    );
    assert_eq!(lobby(&mut c), 1, "nothing else joined");
    // The reverse order: a lock's lobby refuses a semaphore request.
    let _w = park(
        &s,
        &mut c,
        &["RWLOCK.WLOCK", "l", "w1", "1000", "WAIT", "15000"],
        2,
    );
    let r = at_once(
        &s,
        &["SEMAPHORE.ACQUIRE", "l", "s1", "3", "1000", "WAIT", "15000"],
    );
    assert!(r.err().starts_with("WRONGTYPE"), "{r:?}");
    let r = at_once(&s, &["LEADER.CAMPAIGN", "l", "x", "1000", "WAIT", "15000"]);
    assert!(r.err().starts_with("WRONGTYPE"), "{r:?}");
    assert_eq!(lobby(&mut c), 2);
    assert_eq!(dbsize(&mut c), 0, "the lobby is outside the keyspace");
}

#[test]
fn semaphore_limits_and_permits_are_checked_in_the_lobby() {
    let s = quarantined();
    let mut c = conn(&s);
    let _a = park(
        &s,
        &mut c,
        &["SEMAPHORE.ACQUIRE", "k", "a", "5", "1000", "WAIT", "15000"],
        1,
    );
    for args in [
        ["SEMAPHORE.ACQUIRE", "k", "b", "1", "1000", "WAIT", "15000"],
        ["SEMAPHORE.ACQUIRE", "k", "c", "1", "1000", "WAIT", "15000"],
    ] {
        let r = at_once(&s, &args);
        assert!(r.err().contains("limit is 5"), "{args:?}: {r:?}");
    }
    // A request for more permits than the name's limit.
    let _one = park(
        &s,
        &mut c,
        &[
            "SEMAPHORE.ACQUIRE",
            "one",
            "a",
            "1",
            "1000",
            "WAIT",
            "15000",
        ],
        2,
    );
    let r = at_once(
        &s,
        &[
            "SEMAPHORE.ACQUIRE",
            "one",
            "b",
            "5",
            "1000",
            "PERMITS",
            "5",
            "WAIT",
            "15000",
        ],
    );
    assert!(r.err().contains("limit is 1"), "{r:?}");
    let r = at_once(&s, &["SEMAPHORE.INFO", "one"]);
    assert_eq!(r.get("waiters").map(Resp::int), Some(1), "{r:?}");
    assert_eq!(lobby(&mut c), 2);
}

#[test]
fn max_waiters_holds_in_the_lobby() {
    let s = quarantined();
    let mut c = conn(&s);
    r!(c, "CONFIG", "SET", "lease.max-waiters", "2");
    let _a = park(
        &s,
        &mut c,
        &["RWLOCK.WLOCK", "k", "a", "1000", "WAIT", "15000"],
        1,
    );
    let _b = park(
        &s,
        &mut c,
        &["RWLOCK.RLOCK", "k", "b", "1000", "WAIT", "15000"],
        2,
    );
    for i in 0..4 {
        let owner = format!("x{i}");
        let r = at_once(&s, &["RWLOCK.WLOCK", "k", &owner, "1000", "WAIT", "15000"]);
        assert!(r.err().contains("too many waiters"), "{r:?}");
    }
    let r = at_once(&s, &["RWLOCK.INFO", "k"]);
    assert_eq!(r.get("waiters").map(Resp::int), Some(2), "{r:?}");
    assert_eq!(lobby(&mut c), 2);
}

/// A lock key held by `holder` for `ttl` ms, as DUMP gives it (made on a server without a
/// quarantine).
fn dumped(ttl: u64) -> Vec<u8> {
    let src = debug_server();
    let mut c = conn(&src);
    token(&r!(c, "RWLOCK.WLOCK", "src", "holder", ttl));
    redis::cmd("DUMP").arg("src").query(&mut c).unwrap()
}

/// A parked `WAIT wait_ms` request on `k` meets a key arriving by `arrive`; it must be
/// answered (nil: the arrived key is held) at its own deadline, not later.
fn arrival(how: &str, arrive: impl FnOnce(&mut Connection, &[u8])) {
    let payload = dumped(30_000);
    let s = quarantined();
    let mut c = conn(&s);
    const WAIT: u64 = 2000;
    let started = Instant::now();
    let mut w = park(
        &s,
        &mut c,
        &["RWLOCK.WLOCK", "k", "w", "1000", "WAIT", &WAIT.to_string()],
        1,
    );
    arrive(&mut c, &payload);
    assert_eq!(exists(&mut c, "k"), 1, "{how}: the key arrived");
    let reply = w
        .try_reply(Duration::from_millis(WAIT + 2500))
        .unwrap()
        .unwrap_or_else(|| {
            panic!(
                "{how}: the waiter was not answered {:?} after its WAIT {WAIT}",
                started.elapsed()
            )
        });
    assert!(reply.is_nil(), "{how}: {reply:?}");
    assert!(
        started.elapsed() >= Duration::from_millis(WAIT - 50),
        "{how}: answered before its deadline"
    );
    assert_eq!(lobby(&mut c), 0, "{how}");
    let i = lock_info(&mut c, "k");
    assert_eq!(i.owners(), ["holder"], "{how}: {i:?}");
    assert_eq!(i.waiters, 0, "{how}");
    // The arrived key's holder keeps working.
    assert_eq!(unlock(&mut c, "k", "holder"), 1, "{how}");
}

#[test]
fn a_key_restored_at_a_held_back_name_answers_its_waiters() {
    arrival("RESTORE", |c, p| {
        r!(c, "RESTORE", "k", 0, p);
    });
}

#[test]
fn a_key_renamed_to_a_held_back_name_answers_its_waiters() {
    arrival("RENAME", |c, p| {
        r!(c, "RESTORE", "other", 0, p);
        r!(c, "RENAME", "other", "k");
    });
}

#[test]
fn a_key_copied_to_a_held_back_name_answers_its_waiters() {
    arrival("COPY", |c, p| {
        r!(c, "RESTORE", "other", 0, p);
        r!(c, "COPY", "other", "k");
        r!(c, "DEL", "other");
    });
}

#[test]
fn a_key_moved_to_a_held_back_name_answers_its_waiters() {
    arrival("MOVE", |c, p| {
        r!(c, "SELECT", 1);
        r!(c, "RESTORE", "k", 0, p);
        r!(c, "MOVE", "k", 0);
        r!(c, "SELECT", 0);
    });
}

/// A waiter parked in the lobby behind a key that arrives and is then released gets the lock
/// (once grants open), in arrival order with the key's own waiters.
#[test]
fn a_lobby_waiter_is_answered_by_the_timer_at_its_deadline() {
    let s = quarantined();
    let mut c = conn(&s);
    let started = Instant::now();
    let mut w = park(
        &s,
        &mut c,
        &["LEADER.CAMPAIGN", "e", "a", "1000", "WAIT", "1200"],
        1,
    );
    let r = w.try_reply(Duration::from_millis(3500)).unwrap();
    let r = r.unwrap_or_else(|| panic!("not answered {:?} after WAIT 1200", started.elapsed()));
    assert!(r.is_nil(), "{r:?}");
    assert!(started.elapsed() >= Duration::from_millis(1150));
    assert_eq!(lobby(&mut c), 0);
    assert_eq!(dbsize(&mut c), 0);
}
