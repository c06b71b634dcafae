//! An adversarial review of the multi-key requests (RWLOCK.MLOCK / MUNLOCK / MRENEW and the
//! grant of a parked multi-key request by drain/try_grant and by the timer) against the side
//! paths: the hold-back lobby (quarantine, eviction), keys that move (SWAPDB, DEBUG RELOAD),
//! a timer that runs late, replication. Parked requests use raw sockets, so a lost, late or
//! doubled reply fails the test. Each test states the contract it checks (docs/COMMANDS.md).

use redis::ConnectionLike;
use std::time::{Duration, Instant};

use redis_lease_testkit::dataset::{converge, dataset, dataset_diff};
use redis_lease_testkit::prelude::*;

const LONG: &str = "60000";

fn sock(s: &Server) -> Sock {
    Sock::connect(s.port)
}

fn sock_db(s: &Server, db: i64) -> Sock {
    let mut c = Sock::connect(s.port);
    assert_eq!(c.cmd(&["SELECT", &db.to_string()]).bytes(), b"OK");
    c
}

fn tokens(r: &Resp) -> Vec<i64> {
    r.array().iter().map(|t| t.int()).collect()
}

/// The owners holding `key` now (from RWLOCK.INFO).
fn holders(c: &mut Sock, key: &str) -> Vec<String> {
    c.owners(key, "holders")
}

/// `waiters` of RWLOCK.INFO `key`.
fn key_waiters(c: &mut Sock, key: &str) -> i64 {
    c.cmd(&["RWLOCK.INFO", key])
        .get("waiters")
        .map_or(-1, |w| w.int())
}

/// The owners in `queue` of RWLOCK.INFO `key`, in order.
fn queue(c: &mut Sock, key: &str) -> Vec<String> {
    c.owners(key, "queue")
}

/// No reply arrives on `w` for a while: it is parked.
fn parked(w: &mut Sock, what: &str) {
    let r = w.try_reply(Duration::from_millis(300)).expect("connection");
    assert!(r.is_none(), "{what}: expected a parked request, got {r:?}");
}

/// Waits until the server counts `n` parked requests.
fn await_parked(c: &mut Sock, n: i64) {
    until(Duration::from_secs(10), "the requests park", || {
        c.lease_int("lease_waiters") == n
    });
}

// ---------------------------------------------------------------------------------------------
// SWAPDB

/// COMMANDS.md: "SWAPDB moves keys, their timers and their waiters with the db", and a parked
/// multi-key request "is granted, on every key in one go, at the moment the last of its keys
/// frees up for it".
///
/// A multi-key request parked on keys of db 0; SWAPDB 0 1 moves them (and it) to db 1; the
/// last holder there lets go. The request must be granted there, and the key must not stay
/// blocked for everyone else.
#[test]
fn swapdb_carries_a_parked_multi_key_request() {
    let s = Server::start();
    let mut c0 = sock(&s);
    assert!(c0.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
    parked(&mut m, "MLOCK a b");
    assert_eq!(c0.cmd(&["SWAPDB", "0", "1"]).bytes(), b"OK");
    let mut c1 = sock_db(&s, 1);
    assert_eq!(holders(&mut c1, "a"), vec!["x"], "a moved to db 1");
    assert_eq!(key_waiters(&mut c1, "a"), 1, "with its waiter");
    assert_eq!(c1.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
    let got = m.try_reply(Duration::from_secs(5)).expect("connection");
    let after = (
        holders(&mut c1, "a"),
        holders(&mut c1, "b"),
        key_waiters(&mut c1, "a"),
        c1.cmd(&["RWLOCK.WLOCK", "a", "y", LONG]),
    );
    assert!(
        matches!(&got, Some(Resp::Array(t)) if t.len() == 2),
        "the parked MLOCK was not granted after SWAPDB when its keys freed up: reply {got:?}; \
         db 1 then: a held by {:?}, b held by {:?}, a's waiters {}, a new WLOCK a: {:?} \
         (the key is blocked for everyone)",
        after.0,
        after.1,
        after.2,
        after.3
    );
    assert_eq!(after.0, vec!["m"]);
    assert_eq!(after.1, vec!["m"]);
}

// ---------------------------------------------------------------------------------------------
// DEBUG RELOAD

/// COMMANDS.md: "A reload (`DEBUG RELOAD`) is not a deletion: waiters whose key comes back
/// wait on", and a waiting MLOCK "keeps its place in each queue: a later request on any of its
/// keys does not overtake it (strict FIFO, as for one key)".
///
/// m waits on a and b (both held). After DEBUG RELOAD it must still be first in b's queue, so
/// a single-key request on b that comes later is not served before it.
#[test]
fn a_reload_keeps_a_multi_key_request_on_every_key() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    assert_eq!(queue(&mut c, "b"), vec!["m"]);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]).bytes(), b"OK");
    let (qa, qb) = (queue(&mut c, "a"), queue(&mut c, "b"));
    // A later request on b, then b's holder lets go.
    let mut w = sock(&s);
    w.send_text(&["RWLOCK.WLOCK", "b", "w", LONG, "WAIT", "0"]);
    await_parked(&mut c, 2);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "b", "y"]).int(), 1);
    let overtaken = w.try_reply(Duration::from_millis(500)).expect("connection");
    assert!(
        overtaken.is_none(),
        "after DEBUG RELOAD the later WLOCK b overtook the parked MLOCK a b: it got {overtaken:?} \
         (queues after the reload: a {qa:?}, b {qb:?}; m should be in both)"
    );
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
    let t = tokens(&m.reply("MLOCK a b"));
    assert_eq!(t.len(), 2);
    assert_eq!(holders(&mut c, "b"), vec!["m"]);
}

// ---------------------------------------------------------------------------------------------
// A timer that runs late

/// Runs `request` (parked, WAIT 700 ms) on a, which x holds with a 400 ms lease; blocks the
/// server with DEBUG SLEEP across both deadlines (the lease's first, then the wait's, 300 ms
/// apart); answers the request's reply.
fn late_timer(request: &[&str]) -> Resp {
    for attempt in 0..5 {
        let s = Server::with(debug_opts());
        let mut c = sock(&s);
        let t0 = Instant::now();
        assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", "400"]).int() > 0);
        let mut m = sock(&s);
        m.send_text(request);
        // Parked (INFO counts it), then the server is blocked long before either deadline.
        let mut d = sock(&s);
        until(Duration::from_secs(2), "the request parks", || {
            d.lease_int("lease_waiters") == 1
        });
        if t0.elapsed() > Duration::from_millis(200) {
            eprintln!("attempt {attempt}: too slow to set up ({:?})", t0.elapsed());
            continue;
        }
        // 0.9 s: from about 50 ms to about 950 ms (the lease ends at 400, the wait at 700).
        d.send_text(&["DEBUG", "SLEEP", "0.9"]);
        let r = m.reply_within(Duration::from_secs(5), "the parked request");
        assert_eq!(d.reply("DEBUG SLEEP").bytes(), b"OK");
        assert!(
            t0.elapsed() >= Duration::from_millis(900),
            "the server was not blocked"
        );
        return r;
    }
    panic!("could not set the scenario up in time");
}

/// COMMANDS.md: "Time passes in order. At each lease deadline every lease that ends by then
/// lapses and the key is handed on; a wait that ends before the key frees up for it ends
/// (nil) ... so a waiter still waiting at the moment the key frees up is served. This holds
/// even when the timer runs late: the result is what a timer on time would have given."
///
/// The single-key request: granted (this holds).
#[test]
fn a_late_timer_serves_a_single_key_waiter_whose_key_freed_before_its_wait_ended() {
    let r = late_timer(&["RWLOCK.WLOCK", "a", "m", LONG, "WAIT", "700"]);
    assert!(matches!(r, Resp::Int(t) if t > 0), "{r:?}");
}

/// The same for a multi-key request: a was free from 400 ms (b is free), its wait ended at
/// 700 ms; a timer on time would have granted it at 400 ms.
#[test]
fn a_late_timer_serves_a_multi_key_waiter_whose_keys_freed_before_its_wait_ended() {
    let r = late_timer(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "700"]);
    assert!(
        matches!(&r, Resp::Array(t) if t.len() == 2),
        "the multi-key request got {r:?}: a freed up (lapse at 400 ms) before its wait ended \
         (700 ms), and the single-key request in the same place is granted"
    );
}

// ---------------------------------------------------------------------------------------------
// A key of the request that leaves the lobby

/// Sets up: h holds a (a lease from before the quarantine); a reload quarantines for 2 s; m
/// asks for a and b (b free) and waits; the quarantine ends, and b's state, m at its head (not
/// grantable while h holds a), holds nothing: it stays outside the keyspace, in the lobby,
/// where the quarantine put it, and its waiter is woken there (the lobby's wake-up as grants
/// open). Answers (server, m's socket).
fn waiting_on_a_key_that_left_the_lobby() -> (Server, Sock) {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "h", LONG]).int() > 0);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "lease.quarantine", "2000"])
            .bytes(),
        b"OK"
    );
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]).bytes(), b"OK");
    assert!(c.lease_int("lease_quarantine_ms") > 1000);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", "2000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    assert_eq!(
        c.lease_int("lease_lobby_waiters"),
        1,
        "b waits in the lobby"
    );
    until(Duration::from_secs(10), "the quarantine ends", || {
        c.lease_int("lease_quarantine_ms") == 0
    });
    // Past the lobby's wake-up as grants opened.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        c.cmd(&["EXISTS", "b"]).int(),
        0,
        "a key b that holds nothing"
    );
    assert_eq!(c.lease_int("lease_lobby_waiters"), 1);
    assert_eq!(queue(&mut c, "a"), vec!["m"]);
    assert_eq!(queue(&mut c, "b"), vec!["m"]);
    (s, m)
}

/// COMMANDS.md (Deadlocks found by the server): "A request with WAIT (RWLOCK, WLOCK, MLOCK,
/// CAMPAIGN, ACQUIRE) that would close a cycle in this server's wait-for graph is answered at
/// once with an error starting with `DEADLOCK`".
///
/// m (parked on a and b) waits for h, who holds a. h now asks for b with WAIT: it would wait
/// behind m, which waits for h: a cycle. After b's state went through the lobby, the server
/// no longer sees that m waits on a.
#[test]
fn a_cycle_through_a_multi_key_request_whose_key_left_the_lobby_is_refused() {
    let (s, mut m) = waiting_on_a_key_that_left_the_lobby();
    let mut h = sock(&s);
    h.send_text(&["RWLOCK.WLOCK", "b", "h", "1000", "WAIT", "0"]);
    let r = h.try_reply(Duration::from_secs(2)).expect("connection");
    let mut c = sock(&s);
    let stuck = (
        queue(&mut c, "a"),
        queue(&mut c, "b"),
        c.lease_int("lease_deadlocks"),
    );
    assert!(
        matches!(&r, Some(Resp::Error(e)) if e.starts_with("DEADLOCK")),
        "h's WLOCK b WAIT 0 closes a cycle (m waits on a for h, h would wait on b behind m) but \
         got {r:?}: now a's queue {:?}, b's queue {:?}, lease_deadlocks {}: both wait forever",
        stuck.0,
        stuck.1,
        stuck.2
    );
    parked(&mut m, "MLOCK a b");
}

/// The same set-up, without a lobby: the cycle is refused (this holds).
#[test]
fn a_cycle_through_a_multi_key_request_is_refused() {
    let s = Server::start();
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "h", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", "2000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    let r = c.cmd(&["RWLOCK.WLOCK", "b", "h", "1000", "WAIT", "0"]);
    assert!(r.err().starts_with("DEADLOCK"), "{r:?}");
}

/// COMMANDS.md: "a client that leaves leaves every queue", and RWLOCK.INFO's `waiters` is "how
/// many wait" (a waiter whose client left is not shown in `queue`).
///
/// m leaves (its connection closes) after b's state went through the lobby: a must not go on
/// counting it.
#[test]
fn a_multi_key_request_whose_key_left_the_lobby_leaves_every_queue() {
    let (s, m) = waiting_on_a_key_that_left_the_lobby();
    let mut c = sock(&s);
    drop(m);
    until(Duration::from_secs(5), "m left", || {
        c.lease_int("lease_waiters") == 0
    });
    assert_eq!(key_waiters(&mut c, "b"), 0);
    let ok = eventually(Duration::from_secs(3), || key_waiters(&mut c, "a") == 0);
    assert!(
        ok,
        "a still counts {} waiter(s) (queue shows {:?}, INFO lease_waiters {}) after the only \
         request parked on it left",
        key_waiters(&mut c, "a"),
        queue(&mut c, "a"),
        c.lease_int("lease_waiters")
    );
}

// ---------------------------------------------------------------------------------------------
// Evicted leases: a hold-back on one name of a multi-key command

const MAXMEMORY: &str = "4mb";
const VALUE: usize = 32 * 1024;

/// Cache writes until `key` is evicted (at most 3 s); then the cache is deleted again.
fn evict(c: &mut Connection, key: &str) {
    evict_keeping(c, key, &[]);
}

/// The same, reading the keys `keep` after each batch (so LRU keeps them).
fn evict_keeping(c: &mut Connection, key: &str, keep: &[&str]) {
    let start = Instant::now();
    let value = vec![b'x'; VALUE];
    let mut written = 0;
    while start.elapsed() < Duration::from_secs(3) && exists(c, key) == 1 {
        for k in keep {
            for _ in 0..10 {
                let _: redis::Value = redis::cmd("TOUCH").arg(*k).query(c).unwrap();
            }
        }
        let mut p = redis::pipe();
        for i in written..written + 20 {
            p.cmd("SET").arg(format!("cache:{i}")).arg(value.as_slice());
        }
        c.req_packed_commands(&p.get_packed_pipeline(), 0, 20)
            .expect("cache writes");
        written += 20;
    }
    assert_eq!(exists(c, key), 0, "{key} was not evicted");
    let names: Vec<String> = (0..written).map(|i| format!("cache:{i}")).collect();
    for chunk in names.chunks(500) {
        let _: i64 = redis::cmd("DEL").arg(chunk).query(c).unwrap();
    }
}

/// COMMANDS.md: "Hand-off happens inside the server, at the moment a hold is released or
/// lapses: the next waiter(s) get their reply in the same event-loop turn", and "MUNLOCK /
/// MRENEW are UNLOCK / RENEW on each key". Eviction holds back grants "on that name" only.
///
/// H held a and b (b's key was evicted while its lease ran: grants on b are held back for a
/// while). W waits for a. H gives both back with MUNLOCK: a is free, so W must get it at once.
/// Also, a replica must end up with the master's keys.
#[test]
fn munlock_next_to_an_evicted_name_hands_the_free_key_on() {
    let s = Server::with(
        debug_opts()
            .arg("maxmemory", MAXMEMORY)
            .arg("maxmemory-policy", "allkeys-lru"),
    );
    let replica = start_replica(&s);
    let mut c = conn(&s);
    assert!(wlock(&mut c, "b", "H", 15_000).is_some());
    evict(&mut c, "b");
    assert_eq!(info_int(&mut c, "lease", "lease_evicted_holdbacks"), 1);
    let mut k = sock(&s);
    assert!(k.cmd(&["RWLOCK.WLOCK", "a", "H", LONG]).int() > 0);
    let mut w = sock(&s);
    w.send_text(&["RWLOCK.WLOCK", "a", "W", LONG, "WAIT", "0"]);
    await_parked(&mut k, 1);
    assert_eq!(k.cmd(&["RWLOCK.MUNLOCK", "2", "a", "b", "H"]).int(), 1);
    let got = w.try_reply(Duration::from_secs(2)).expect("connection");
    let a_after = (holders(&mut k, "a"), key_waiters(&mut k, "a"));
    sync(&s, &replica);
    let (dm, dr) = (dataset(&mut conn(&s)), dataset(&mut conn(&replica)));
    assert!(
        matches!(got, Some(Resp::Int(t)) if t > 0),
        "W was not handed a after MUNLOCK a b released it (got {got:?}); a now: holders {:?}, \
         waiters {} (nothing will wake it: W waits without a limit); master keys {:?} vs \
         replica keys {:?}",
        a_after.0,
        a_after.1,
        dm.keys().collect::<Vec<_>>(),
        dr.keys().collect::<Vec<_>>()
    );
    assert_eq!(dataset_diff(&dm, &dr), None);
}

/// The same with RWLOCK.UNLOCK on a alone (this holds).
#[test]
fn unlock_next_to_an_evicted_name_hands_the_free_key_on() {
    let s = Server::with(
        debug_opts()
            .arg("maxmemory", MAXMEMORY)
            .arg("maxmemory-policy", "allkeys-lru"),
    );
    let mut c = conn(&s);
    assert!(wlock(&mut c, "b", "H", 15_000).is_some());
    evict(&mut c, "b");
    let mut k = sock(&s);
    assert!(k.cmd(&["RWLOCK.WLOCK", "a", "H", LONG]).int() > 0);
    let mut w = sock(&s);
    w.send_text(&["RWLOCK.WLOCK", "a", "W", LONG, "WAIT", "0"]);
    await_parked(&mut k, 1);
    assert_eq!(k.cmd(&["RWLOCK.UNLOCK", "a", "H"]).int(), 1);
    let got = w.reply_within(Duration::from_secs(2), "W");
    assert!(got.int() > 0, "{got:?}");
}

// ---------------------------------------------------------------------------------------------
// One key of the set replaced by a key of another kind, then a reload

/// In one pipeline (one turn of the event loop): b is deleted, a semaphore of `limit` is made
/// at b (one permit taken), and the server reloads.
fn replace_b_with_a_semaphore_and_reload(c: &mut Sock, limit: &str) {
    c.send_pipeline(&[
        &["DEL", "b"],
        &["SEMAPHORE.ACQUIRE", "b", "s", limit, LONG],
        &["DEBUG", "RELOAD"],
    ]);
    assert_eq!(c.reply("DEL").int(), 1);
    assert!(c.reply("ACQUIRE").int() > 0);
    assert_eq!(c.reply("DEBUG RELOAD").bytes(), b"OK");
}

/// COMMANDS.md: "A waiter whose key is deleted, renamed, moved or flushed while it waits is
/// answered an error starting with `LOCKGONE` (within one event-loop turn)", and "any command
/// of one kind on a key of another" is WRONGTYPE.
///
/// m waits on a and b. In one pipeline (one turn of the event loop): b is deleted, a
/// semaphore is made at b, and the server reloads. m must be answered LOCKGONE; the
/// semaphore must stay usable.
#[test]
fn a_multi_key_request_whose_key_was_replaced_by_a_semaphore_before_a_reload() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    replace_b_with_a_semaphore_and_reload(&mut c, "1");
    let got = m.try_reply(Duration::from_secs(2)).expect("connection");
    // The semaphore's holder lets go: the semaphore is free for anyone.
    assert_eq!(c.cmd(&["SEMAPHORE.RELEASE", "b", "s"]).int(), 1);
    let sem = c.cmd(&["SEMAPHORE.INFO", "b"]);
    let other = c.cmd(&["SEMAPHORE.ACQUIRE", "b", "s2", "1", LONG]);
    assert!(
        matches!(&got, Some(Resp::Error(e)) if e.starts_with("LOCKGONE")),
        "m got {got:?} instead of LOCKGONE; semaphore b after its holder left: {sem:?}; a new \
         ACQUIRE b: {other:?}"
    );
    assert!(other.int() > 0, "the semaphore is blocked: {sem:?}");
}

/// The single-key twin: a WLOCK waiter of b, b replaced by a semaphore with room, then a
/// reload in the same turn. An RWLOCK request must never be answered with a semaphore permit.
#[test]
fn a_lock_waiter_whose_key_was_replaced_by_a_semaphore_before_a_reload() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
    let mut w = sock(&s);
    w.send_text(&["RWLOCK.WLOCK", "b", "w", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    replace_b_with_a_semaphore_and_reload(&mut c, "2");
    let got = w.try_reply(Duration::from_secs(2)).expect("connection");
    let sem = c.cmd(&["SEMAPHORE.INFO", "b"]);
    assert!(
        matches!(&got, Some(Resp::Error(e)) if e.starts_with("LOCKGONE")),
        "the WLOCK b waiter got {got:?} instead of LOCKGONE; semaphore b now: {sem:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// FLUSHALL while one key of the request waits in the lobby

/// COMMANDS.md: "A waiter whose key is deleted, renamed, moved or flushed while it waits is
/// answered an error starting with `LOCKGONE` (within one event-loop turn)"; "DEL and FLUSHALL
/// of other keys leave the lobby alone".
///
/// y holds b (from before a reload's quarantine); m asks for a (free: its state waits in the
/// lobby) and b (behind y). FLUSHALL deletes b with its holder: m's key was flushed. m must be
/// answered LOCKGONE at once, or at the very least be granted when grants open (b is free
/// then); it must never be left waiting at the head of a's queue, blocking a for everyone.
#[test]
fn flushall_of_a_key_of_a_request_waiting_in_the_lobby() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "lease.quarantine", "2000"])
            .bytes(),
        b"OK"
    );
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]).bytes(), b"OK");
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", "2000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    assert_eq!(
        c.lease_int("lease_lobby_waiters"),
        1,
        "a waits in the lobby"
    );
    assert_eq!(queue(&mut c, "b"), vec!["m"]);
    assert_eq!(c.cmd(&["FLUSHALL"]).bytes(), b"OK");
    let at_once = m.try_reply(Duration::from_secs(1)).expect("connection");
    if let Some(r) = &at_once {
        assert!(r.err().starts_with("LOCKGONE"), "{r:?}");
        return;
    }
    // Not answered: then at least when grants open (b is free: nobody holds it).
    until(Duration::from_secs(10), "the quarantine ends", || {
        c.lease_int("lease_quarantine_ms") == 0
    });
    let later = m.try_reply(Duration::from_secs(3)).expect("connection");
    let (qa, other) = (
        queue(&mut c, "a"),
        c.cmd(&["RWLOCK.WLOCK", "a", "z", "1000"]),
    );
    assert!(
        matches!(&later, Some(Resp::Array(_)) | Some(Resp::Error(_))),
        "m's key b was flushed (with its holder) while m waited: no LOCKGONE, and 3 s after \
         grants opened m still waits (reply {later:?}); a's queue {qa:?}; WLOCK a by anyone \
         else: {other:?} (a is blocked for good)"
    );
}

// ---------------------------------------------------------------------------------------------
// INFO while a multi-key request waits in the lobby

/// COMMANDS.md (INFO lease): `lease_waiters` (now), `lease_lobby_waiters` "(requests parked
/// for names without a key)".
///
/// One MLOCK of two free keys during a quarantine: one request is parked, for two names.
#[test]
fn info_counts_one_parked_multi_key_request_in_the_lobby_once() {
    let s = Server::with(debug_opts().module_arg("quarantine", "20000"));
    let mut c = sock(&s);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", "1000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    let (lobby, waiting) = (
        c.lease_int("lease_lobby_waiters"),
        c.lease_int("lease_waiters"),
    );
    assert_eq!(
        (lobby, waiting),
        (1, 1),
        "one request parked (lease_waiters {waiting}), lease_lobby_waiters says {lobby}"
    );
}

// ---------------------------------------------------------------------------------------------
// Replication and the AOF after the multi-key side paths

/// The replica's and the AOF's view (every key, its holders and tokens) equal the master's
/// after a run of multi-key requests through the side paths: an immediate grant, a parked
/// grant at UNLOCK and at a lapse (timer), a timeout, a client killed while parked, MRENEW and
/// its MAXHOLD refusal, a READ request with re-entry and upgrade, a DEBUG RELOAD while one
/// waits, and an AOF rewrite while one waits. Every parked request gets exactly one reply.
#[test]
fn replica_and_aof_equal_the_master_after_multi_key_side_paths() {
    let s = Server::with(debug_opts().arg("appendonly", "yes"));
    let replica = start_replica(&s);
    let mut c = sock(&s);
    // Immediate, MRENEW, MUNLOCK of part.
    let t = tokens(&c.cmd(&[
        "RWLOCK.MLOCK",
        "3",
        "k1",
        "k2",
        "k3",
        "o",
        LONG,
        "MAXHOLD",
        "90000",
    ]));
    assert_eq!(t.len(), 3);
    assert_eq!(
        c.cmd(&["RWLOCK.MRENEW", "2", "k1", "k2", "o", "30000"])
            .int(),
        2
    );
    let e = c.cmd(&["RWLOCK.MRENEW", "2", "k1", "k3", "o", "95000"]);
    assert!(e.err().starts_with("MAXHOLD"), "{e:?}");
    assert_eq!(c.cmd(&["RWLOCK.MUNLOCK", "2", "k1", "nokey", "o"]).int(), 1);
    // Parked, granted at UNLOCK.
    let mut p1 = sock(&s);
    p1.send_text(&["RWLOCK.MLOCK", "2", "k2", "k4", "p1", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "k2", "o"]).int(), 1);
    assert_eq!(tokens(&p1.reply("p1")).len(), 2);
    // Parked, granted by the timer at a lapse.
    assert!(c.cmd(&["RWLOCK.WLOCK", "k5", "short", "300"]).int() > 0);
    let mut p2 = sock(&s);
    p2.send_text(&["RWLOCK.MLOCK", "2", "k5", "k6", "p2", LONG, "WAIT", "5000"]);
    assert_eq!(tokens(&p2.reply("p2")).len(), 2);
    // Parked, timed out.
    let mut p3 = sock(&s);
    p3.send_text(&["RWLOCK.MLOCK", "2", "k7", "k5", "p3", LONG, "WAIT", "300"]);
    assert!(p3.reply("p3").is_nil());
    // Parked, its client killed.
    let mut p4 = sock(&s);
    let id4 = p4.cmd(&["CLIENT", "ID"]).int();
    p4.send_text(&["RWLOCK.MLOCK", "2", "k8", "k5", "p4", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    assert_eq!(c.cmd(&["CLIENT", "KILL", "ID", &id4.to_string()]).int(), 1);
    await_parked(&mut c, 0);
    // READ with re-entry (r holds k9 for reading) and an upgrade (u reads k10 alone).
    assert!(c.cmd(&["RWLOCK.RLOCK", "k9", "r", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.WLOCK", "k11", "w", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.RLOCK", "k10", "u", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.RLOCK", "k10", "v", LONG]).int() > 0);
    let mut p6 = sock(&s);
    p6.send_text(&["RWLOCK.MLOCK", "1", "k10", "u", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    // An AOF rewrite and a reload while it waits (one key: a reload loses a multi-key
    // request's place on its other keys, see the a_reload_keeps_* tests).
    c.cmd(&["BGREWRITEAOF"]);
    wait_persistence_idle(&mut conn(&s));
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]).bytes(), b"OK");
    let mut p5 = sock(&s);
    p5.send_text(&[
        "RWLOCK.MLOCK",
        "2",
        "k9",
        "k11",
        "r",
        LONG,
        "READ",
        "WAIT",
        "0",
    ]);
    await_parked(&mut c, 2);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "k11", "w"]).int(), 1);
    assert_eq!(tokens(&p5.reply("p5")).len(), 2);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "k10", "v"]).int(), 1);
    let t6 = tokens(&p6.reply("p6"));
    assert_eq!(t6.len(), 1);
    for (w, what) in [
        (&mut p1, "p1"),
        (&mut p2, "p2"),
        (&mut p3, "p3"),
        (&mut p5, "p5"),
        (&mut p6, "p6"),
    ] {
        let again = w.try_reply(Duration::from_millis(100)).expect("connection");
        assert!(again.is_none(), "{what} answered twice: {again:?}");
    }
    await_parked(&mut c, 0);
    sync(&s, &replica);
    let seen = converge(&s, &replica, Duration::from_secs(10), "replica");
    // The AOF: the master loaded from it alone has the same keys, holders and tokens.
    wait_persistence_idle(&mut conn(&s));
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]).bytes(), b"OK");
    let from_aof = dataset(&mut conn(&s));
    let strip = |d: &redis_lease_testkit::dataset::Dataset| -> Vec<(String, String)> {
        d.iter()
            .map(|(k, v)| (k.clone(), v.split(" dump ").next().unwrap().to_string()))
            .collect()
    };
    assert_eq!(strip(&from_aof), strip(&seen), "the AOF replay differs");
}

// ---------------------------------------------------------------------------------------------
// A demotion while a multi-key request waits

/// COMMANDS.md: "When the server becomes a replica, Redis closes its blocked clients
/// (`-UNBLOCKED`) and the module empties its queues"; every parked request gets exactly one
/// reply; a replica's keys equal its master's.
#[test]
fn a_demotion_answers_a_parked_multi_key_request_once() {
    let s = Server::with(debug_opts());
    let other = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    assert_eq!(
        c.cmd(&["REPLICAOF", "127.0.0.1", &other.port.to_string()])
            .bytes(),
        b"OK"
    );
    let r = m.try_reply(Duration::from_secs(5));
    match r {
        Ok(Some(Resp::Error(e))) => assert!(
            e.starts_with("UNBLOCKED") || e.starts_with("READONLY"),
            "{e}"
        ),
        other => panic!("expected one error reply, got {other:?}"),
    }
    assert!(m
        .try_reply(Duration::from_millis(300))
        .map_or(true, |r| r.is_none()));
    sync(&other, &s);
    converge(&other, &s, Duration::from_secs(10), "demoted");
    assert_eq!(c.lease_int("lease_waiters"), 0);
    assert_eq!(c.lease_int("lease_lobby_waiters"), 0);
}

/// COMMANDS.md: "A reload (`DEBUG RELOAD`) is not a deletion: waiters whose key comes back
/// wait on"; MLOCK: "a key the owner already holds in a covering mode counts as grantable and
/// is not queued".
///
/// r reads a and asks for a and b for reading (b has a writer): it is queued on b only. After
/// DEBUG RELOAD it must still wait on b and be granted when b's writer lets go.
#[test]
fn a_reload_keeps_a_reentrant_multi_key_request() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.RLOCK", "a", "r", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "w", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&[
        "RWLOCK.MLOCK",
        "2",
        "a",
        "b",
        "r",
        LONG,
        "READ",
        "WAIT",
        "0",
    ]);
    await_parked(&mut c, 1);
    assert_eq!(queue(&mut c, "b"), vec!["r"]);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]).bytes(), b"OK");
    let qb = queue(&mut c, "b");
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "b", "w"]).int(), 1);
    let got = m.try_reply(Duration::from_secs(3)).expect("connection");
    assert!(
        matches!(&got, Some(Resp::Array(t)) if t.len() == 2),
        "after DEBUG RELOAD the parked MLOCK a b READ was in no queue (b's queue after the \
         reload: {qb:?}) and b's writer let go: reply {got:?}; lease_waiters {} (it waits \
         forever: nothing will ever report it ready)",
        c.lease_int("lease_waiters")
    );
}

/// The same for a multi-key request whose second key is free (so it has no holder and exists
/// only for the request's place in its queue): x holds a, m asks for a and b. After DEBUG
/// RELOAD x lets go of a: m must be granted both.
#[test]
fn a_reload_keeps_a_multi_key_request_whose_other_key_is_free() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    let before = (queue(&mut c, "a"), queue(&mut c, "b"));
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]).bytes(), b"OK");
    let after = (
        queue(&mut c, "a"),
        queue(&mut c, "b"),
        c.cmd(&["EXISTS", "b"]).int(),
    );
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
    let got = m.try_reply(Duration::from_secs(3)).expect("connection");
    let other = c.cmd(&["RWLOCK.WLOCK", "a", "z", "1000"]);
    assert!(
        matches!(&got, Some(Resp::Array(t)) if t.len() == 2),
        "MLOCK a b after DEBUG RELOAD, x let go of a: reply {got:?}; queues (a, b) before the \
         reload {before:?}, after (a, b, EXISTS b) {after:?}; a now: queue {:?}, holders {:?}; \
         WLOCK a by anyone else: {other:?}",
        queue(&mut c, "a"),
        holders(&mut c, "a")
    );
}

// ---------------------------------------------------------------------------------------------
// A key of a parked request that goes away (these hold)

/// COMMANDS.md: "A waiter whose key is deleted, renamed, moved or flushed while it waits is
/// answered an error starting with `LOCKGONE` (within one event-loop turn)"; "a client that
/// leaves leaves every queue". For each way b can go while m waits on a and b (and with b
/// first or second in the request): m gets one LOCKGONE, and a keeps no trace of m.
#[test]
fn every_way_a_key_of_a_parked_request_goes_answers_lockgone_once() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    let ways: [&[&str]; 10] = [
        &["DEL", "b"],
        &["UNLINK", "b"],
        &["RENAME", "b", "b2"],
        &["MOVE", "b", "1"],
        &["PEXPIRE", "b", "1"],
        &["EXPIRE", "b", "0"],
        &["FLUSHDB"],
        // Another key arrives onto b.
        &["RENAME", "c", "b"],
        &["COPY", "c", "b", "REPLACE"],
        &["RESTORE", "b", "0", "<c>", "REPLACE"],
    ];
    for first in [false, true] {
        for how in ways {
            c.cmd(&["FLUSHALL"]);
            assert!(c.cmd(&["RWLOCK.WLOCK", "c", "z", LONG]).int() > 0);
            let dump = c.cmd(&["DUMP", "c"]).bytes().to_vec();
            assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
            assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
            let mut m = sock(&s);
            let keys = if first { ["b", "a"] } else { ["a", "b"] };
            m.send_text(&[
                "RWLOCK.MLOCK",
                "2",
                keys[0],
                keys[1],
                "m",
                LONG,
                "WAIT",
                "0",
            ]);
            await_parked(&mut c, 1);
            let args: Vec<&[u8]> = how
                .iter()
                .map(|a| {
                    if *a == "<c>" {
                        dump.as_slice()
                    } else {
                        a.as_bytes()
                    }
                })
                .collect();
            let done = c.call(&args);
            assert!(!matches!(done, Resp::Error(_)), "{how:?}: {done:?}");
            let r = m.reply_within(Duration::from_secs(3), &format!("{how:?}"));
            assert!(
                r.err().starts_with("LOCKGONE"),
                "{how:?} first={first}: {r:?}"
            );
            await_parked(&mut c, 0);
            if how != ["FLUSHDB"] {
                until(Duration::from_secs(3), "a forgets m", || {
                    key_waiters(&mut c, "a") == 0
                });
                assert_eq!(holders(&mut c, "a"), vec!["x"]);
                assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
                assert_eq!(c.cmd(&["EXISTS", "a"]).int(), 0, "{how:?}: a left behind");
            }
            let again = m.try_reply(Duration::from_millis(100)).expect("connection");
            assert!(again.is_none(), "{how:?}: answered twice: {again:?}");
        }
    }
}

/// COMMANDS.md (Deadlocks): "The graph spans RWLOCK, SEMAPHORE and LEADER keys and every db".
/// A cycle through a parked MLOCK and an election, and one through a semaphore (these hold).
#[test]
fn cycles_through_a_multi_key_request_and_other_kinds_are_refused() {
    let s = Server::start();
    let mut c = sock(&s);
    // o1 leads e; o2 holds a; o1 waits for a and b (for o2); o2 campaigns for e (for o1).
    assert!(c.cmd(&["LEADER.CAMPAIGN", "e", "o1", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "o2", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "b", "a", "o1", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    let r = c.cmd(&["LEADER.CAMPAIGN", "e", "o2", LONG, "WAIT", "0"]);
    assert!(r.err().starts_with("DEADLOCK"), "{r:?}");
    // o3 holds the only permit of s; o4 holds c; o3 waits for c and d (MLOCK, for o4); o4
    // asks for a permit of s (for o3).
    assert!(c.cmd(&["SEMAPHORE.ACQUIRE", "s", "o3", "1", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.RLOCK", "c", "o4", LONG]).int() > 0);
    let mut m2 = sock(&s);
    m2.send_text(&["RWLOCK.MLOCK", "2", "c", "d", "o3", LONG, "WAIT", "0"]);
    await_parked(&mut c, 2);
    let r = c.cmd(&["SEMAPHORE.ACQUIRE", "s", "o4", "1", LONG, "WAIT", "0"]);
    assert!(r.err().starts_with("DEADLOCK"), "{r:?}");
    assert_eq!(c.lease_int("lease_deadlocks"), 2);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "o2"]).int(), 1);
    assert_eq!(tokens(&m.reply("o1's MLOCK")).len(), 2);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "c", "o4"]).int(), 1);
    assert_eq!(tokens(&m2.reply("o3's MLOCK")).len(), 2);
}

// ---------------------------------------------------------------------------------------------
// MAXHOLD at the grant of a parked request

/// COMMANDS.md (MLOCK): "Each key follows the single-key rules for that owner as if asked
/// alone (re-entry ...); an error names the key (`(key n)`)".
///
/// o holds a (write, capped at 1500 ms); its MLOCK a b waits for b; when b frees up, re-entry
/// on a would pass a's cap: the refusal must say which key.
#[test]
fn a_parked_request_refused_at_its_grant_names_the_key() {
    let s = Server::start();
    let mut c = sock(&s);
    assert!(
        c.cmd(&["RWLOCK.WLOCK", "a", "o", "1000", "MAXHOLD", "1500"])
            .int()
            > 0
    );
    assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "o", "1000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    std::thread::sleep(Duration::from_millis(600));
    assert!(c.cmd(&["RWLOCK.RENEW", "a", "o", "800"]).int() > 0);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "b", "y"]).int(), 1);
    let r = m.reply("MLOCK a b");
    let e = r.err().to_string();
    assert!(e.starts_with("MAXHOLD"), "{e}");
    assert!(
        e.contains("(key 1)"),
        "the refusal does not name the key: {e:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A replica's keys while a multi-key request waits

/// COMMANDS.md: lock keys carry no TTL "so ... a replica's keys equal its master's"; the
/// lobby keeps held-back names without holders out of the keyspace "so the keyspace stays what
/// replicas and the AOF see".
///
/// x holds a; m waits for a and b (b free). The master makes a key b that holds nothing (only
/// m's place in its queue); the replica has no b.
#[test]
fn a_replica_has_the_masters_keys_while_a_multi_key_request_waits() {
    let s = Server::with(debug_opts());
    let replica = start_replica(&s);
    sync(&s, &replica);
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    sync(&s, &replica);
    let (dm, dr) = (dataset(&mut conn(&s)), dataset(&mut conn(&replica)));
    assert_eq!(
        dataset_diff(&dm, &dr),
        None,
        "master {dm:?}\nreplica {dr:?}"
    );
}

/// "A replica and the AOF end up identical to the master": a replica that syncs, and an AOF
/// rewritten, while m waits for a and b (b free: a key that holds nothing), once m's wait has
/// ended (b is gone from the master).
#[test]
fn a_replica_and_the_aof_end_up_with_the_masters_keys_after_a_multi_key_wait() {
    let s = Server::with(debug_opts().arg("appendonly", "yes"));
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "3000"]);
    await_parked(&mut c, 1);
    let replica = start_replica(&s);
    sync(&s, &replica);
    c.cmd(&["BGREWRITEAOF"]);
    wait_persistence_idle(&mut conn(&s));
    assert!(m.reply("MLOCK a b").is_nil());
    until(Duration::from_secs(3), "b goes", || {
        c.cmd(&["EXISTS", "b"]).int() == 0
    });
    sync(&s, &replica);
    let (dm, dr) = (dataset(&mut conn(&s)), dataset(&mut conn(&replica)));
    let replica_diff = dataset_diff(&dm, &dr);
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]).bytes(), b"OK");
    let da = dataset(&mut conn(&s));
    let aof_diff = dataset_diff(&dm, &da);
    assert!(
        replica_diff.is_none() && aof_diff.is_none(),
        "master {:?}; replica differs: {replica_diff:?}; the master reloaded from its AOF \
         differs: {aof_diff:?}",
        dm.keys().collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------------------------
// More side paths that hold

/// `CONFIG SET lease.quarantine 0` "applies at once: ... its parked requests are served by the
/// usual rules": a multi-key request in two lobbies is granted at once, the single-key request
/// behind it on b keeps waiting until it lets go.
#[test]
fn ending_the_quarantine_serves_a_multi_key_request_in_two_lobbies_first() {
    let s = Server::with(debug_opts().module_arg("quarantine", "20000"));
    let mut c = sock(&s);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", "1000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    let mut w = sock(&s);
    w.send_text(&["RWLOCK.WLOCK", "b", "w", "1000", "WAIT", "0"]);
    await_parked(&mut c, 2);
    assert_eq!(queue(&mut c, "b"), vec!["m", "w"]);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "lease.quarantine", "0"]).bytes(),
        b"OK"
    );
    let t = tokens(&m.reply_within(Duration::from_secs(3), "MLOCK a b"));
    assert_eq!(t.len(), 2);
    parked(&mut w, "WLOCK b");
    assert_eq!(c.cmd(&["RWLOCK.MUNLOCK", "2", "a", "b", "m"]).int(), 2);
    assert!(w.reply("WLOCK b").int() > t[1]);
    assert!(m.try_reply(Duration::from_millis(200)).unwrap().is_none());
}

/// A stall past the bound with `lease.quarantine` set quarantines again "before it decides
/// the first request it reads": a multi-key request whose last key is released right after
/// the stall is not granted during the new quarantine, and is granted once when it ends.
#[test]
fn a_stall_holds_back_a_multi_key_grant_until_the_new_quarantine_ends() {
    let s = Server::with(debug_opts());
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "lease.quarantine", "1500"])
            .bytes(),
        b"OK"
    );
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", "1000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    c.send_pipeline(&[&["DEBUG", "SLEEP", "1.3"], &["RWLOCK.UNLOCK", "a", "x"]]);
    assert_eq!(
        c.reply_within(Duration::from_secs(5), "DEBUG SLEEP")
            .bytes(),
        b"OK"
    );
    assert_eq!(c.reply("UNLOCK").int(), 1);
    let released = Instant::now();
    let t = tokens(&m.reply_within(Duration::from_secs(6), "MLOCK a b"));
    assert_eq!(t.len(), 2);
    assert!(
        released.elapsed() >= Duration::from_millis(1200),
        "granted {:?} after the release, inside the stall's quarantine",
        released.elapsed()
    );
    assert!(c.lease_int("lease_stalls") >= 1);
    assert!(m.try_reply(Duration::from_millis(200)).unwrap().is_none());
}

/// A second MLOCK of the same owner on an overlapping key: both wait in arrival order, the
/// second is granted after the first, re-entrant on the shared key (same token, one more
/// hold to give back).
#[test]
fn two_parked_requests_of_one_owner_on_an_overlapping_key() {
    let s = Server::start();
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    let mut g1 = sock(&s);
    g1.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "o", LONG, "WAIT", "0"]);
    await_parked(&mut c, 1);
    let mut g2 = sock(&s);
    g2.send_text(&["RWLOCK.MLOCK", "2", "b", "c", "o", LONG, "WAIT", "0"]);
    await_parked(&mut c, 2);
    assert_eq!(c.lease_int("lease_deadlocks"), 0);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
    let t1 = tokens(&g1.reply("first"));
    let t2 = tokens(&g2.reply("second"));
    assert_eq!(t2[0], t1[1], "re-entry on b keeps its token");
    let info = c.cmd(&["RWLOCK.INFO", "b"]);
    let h = &info.get("holders").unwrap().array()[0];
    assert_eq!(h.get("count").unwrap().int(), 2, "{info:?}");
    assert_eq!(c.cmd(&["RWLOCK.MUNLOCK", "3", "a", "b", "c", "o"]).int(), 3);
    assert_eq!(holders(&mut c, "b"), vec!["o"]);
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "b", "o"]).int(), 1);
    assert_eq!(c.cmd(&["DBSIZE"]).int(), 0);
}

// ---------------------------------------------------------------------------------------------
// A key the owner held when it asked, and let go of while it waits

/// core/src/multi.rs (grant_ready): "A key it held and lost meanwhile gets it queued there, in
/// its arrival place"; COMMANDS.md: a key the owner already holds "counts as grantable and is
/// not queued", and the request "is granted, on every key in one go, at the moment the last of
/// its keys frees up for it".
///
/// o holds a and asks for a and b (y holds b): it waits on b only. o then lets go of a (so a,
/// with nobody left, is gone); y lets go of b. Both keys are free: o must be granted both, and
/// b must not stay blocked.
#[test]
fn a_request_whose_reentrant_key_was_let_go_while_it_waits() {
    let mut failures = Vec::new();
    for how in ["UNLOCK", "lapse"] {
        let s = Server::start();
        let mut c = sock(&s);
        let ttl = if how == "lapse" { "300" } else { LONG };
        assert!(c.cmd(&["RWLOCK.WLOCK", "a", "o", ttl]).int() > 0);
        assert!(c.cmd(&["RWLOCK.WLOCK", "b", "y", LONG]).int() > 0);
        let mut m = sock(&s);
        m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "o", "1000", "WAIT", "0"]);
        await_parked(&mut c, 1);
        if how == "UNLOCK" {
            assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "o"]).int(), 1);
        }
        until(Duration::from_secs(3), "a is gone", || {
            c.cmd(&["EXISTS", "a"]).int() == 0
        });
        assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "b", "y"]).int(), 1);
        let got = m.try_reply(Duration::from_secs(3)).expect("connection");
        let other = c.cmd(&["RWLOCK.WLOCK", "b", "z", "1000"]);
        if !matches!(&got, Some(Resp::Array(t)) if t.len() == 2) {
            failures.push(format!(
                "{how}: o let go of a while its MLOCK a b waited on b; b freed up: reply \
                 {got:?}; b's queue {:?}, holders {:?}; WLOCK b by anyone else: {other:?}",
                queue(&mut c, "b"),
                holders(&mut c, "b")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// Evicted live leases under a parked multi-key request (these hold)

/// COMMANDS.md (maxmemory): an evicted lock's name "holds back new grants on that name until
/// the evicted leases would have lapsed (... with WAIT they wait outside the keyspace and are
/// served in arrival order then), so eviction never lets a second holder in early".
///
/// m waits for a (x) and b (y); b's key is evicted while y's lease runs; x lets go of a. m
/// must not be granted before y's lease would have ended, and then exactly once, with b's
/// token above y's. Also for a request that parks after the eviction (a lobby on b only).
#[test]
fn a_parked_multi_key_request_waits_out_an_evicted_lease() {
    for when in ["before", "after"] {
        // Eviction may take a too (LRU is sampled): then the scenario is set up again.
        for attempt in 0..6 {
            if evicted_lease_case(when) {
                break;
            }
            assert!(attempt < 5, "{when}: a was evicted with b in every attempt");
        }
    }
}

/// One run of the case above; false if a was evicted too (not the case under test).
fn evicted_lease_case(when: &str) -> bool {
    {
        let s = Server::with(
            debug_opts()
                .arg("maxmemory", MAXMEMORY)
                .arg("maxmemory-policy", "allkeys-lru"),
        );
        let mut c = conn(&s);
        let sent = Instant::now();
        let ty = wlock(&mut c, "b", "y", 7000).unwrap();
        let y_end = sent + Duration::from_millis(7000);
        // b idle for longer than LRU's one-second clock: evicted before a.
        std::thread::sleep(Duration::from_millis(2100));
        assert!(wlock(&mut c, "a", "x", LONG.parse().unwrap()).is_some());
        let mut k = sock(&s);
        let mut m = sock(&s);
        if when == "before" {
            m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
            await_parked(&mut k, 1);
        }
        evict_keeping(&mut c, "b", &["a"]);
        if exists(&mut c, "a") == 0 {
            return false;
        }
        if when == "after" {
            m.send_text(&["RWLOCK.MLOCK", "2", "a", "b", "m", LONG, "WAIT", "0"]);
            await_parked(&mut k, 1);
        }
        assert_eq!(k.lease_int("lease_lobby_waiters"), 1, "{when}");
        assert_eq!(k.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
        let r = m.reply_within(Duration::from_secs(10), "MLOCK a b");
        assert!(
            Instant::now() >= y_end,
            "{when}: granted before y's lease could end"
        );
        let t = tokens(&r);
        assert!(t[1] > ty, "{when}: b's token {t:?} not above y's {ty}");
        assert_eq!(holders(&mut k, "a"), vec!["m"]);
        assert_eq!(holders(&mut k, "b"), vec!["m"]);
        assert!(m.try_reply(Duration::from_millis(200)).unwrap().is_none());
        assert_eq!(k.lease_int("lease_waiters"), 0);
        assert_eq!(k.lease_int("lease_lobby_waiters"), 0);
    }
    true
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: a slot being imported

/// COMMANDS.md (Replication, persistence, cluster): "a master importing a slot (`CLUSTER
/// SETSLOT s IMPORTING src`) makes no new grant on it (nil, or WAIT, as in a quarantine) until
/// the source's mark from after it gave the slot up arrives", so tokens of a key rise across
/// slot moves.
///
/// The source's tokens run 1000 s ahead of the clock (a crafted RESTORE, as the migration test
/// does); the key is released there while its slot migrates; the target is asked (ASKING) for
/// it at once: by WLOCK (held: nil; this holds) and by MLOCK.
#[test]
fn mlock_on_an_importing_slot_waits_for_the_sources_token_mark() {
    use redis_lease_testkit::cluster::Cluster;
    use redis_lease_testkit::dump::push_tokens_ahead;
    let cluster = Cluster::start();
    let ahead: u64 = 1_000_000_000_000;
    let key = "{imp}";
    let key2 = "{imp}:2";
    let src = cluster.owner_of(key);
    let dst = cluster.other_master(&src);
    let mut s = Sock::connect(src.port);
    let t = s.cmd(&["RWLOCK.WLOCK", key, "a", LONG]).int();
    let last = push_tokens_ahead(src.port, key, t, ahead);
    let slot = cluster.slot_of(key);
    cluster.begin_migration(slot, &src, &dst);
    assert_eq!(s.cmd(&["RWLOCK.UNLOCK", key, "a"]).int(), 1);
    let mut d = Sock::connect(dst.port);
    d.cmd(&["ASKING"]);
    let single = d.cmd(&["RWLOCK.WLOCK", key, "b", LONG]);
    d.cmd(&["ASKING"]);
    let multi = d.cmd(&["RWLOCK.MLOCK", "2", key, key2, "m", LONG]);
    let ok = |r: &Resp| match r {
        Resp::Nil => true,
        Resp::Int(t) => *t as u64 > last,
        Resp::Array(ts) => ts.iter().all(|t| t.int() as u64 > last),
        _ => false,
    };
    assert!(
        ok(&single),
        "WLOCK on the importing slot: {single:?} (source's last {last})"
    );
    assert!(
        ok(&multi),
        "MLOCK on the importing slot was granted {multi:?}, below the source's last token \
         {last} for {key} (WLOCK on the same slot at the same moment: {single:?})"
    );
}

/// COMMANDS.md (Deadlocks found by the server), through a name whose state waits outside the
/// keyspace: x holds a; m asks for a and c (c free: its queue, m at the head, waits in the
/// lobby); y holds d and waits for c behind m. x now asks for d with WAIT: x waits for y, y
/// for m (ahead of it on c), m for x (on a): a cycle, seen through c's lobby.
#[test]
fn a_cycle_through_a_name_in_the_lobby_is_refused() {
    let s = Server::start();
    let mut c = sock(&s);
    assert!(c.cmd(&["RWLOCK.WLOCK", "a", "x", LONG]).int() > 0);
    assert!(c.cmd(&["RWLOCK.WLOCK", "d", "y", LONG]).int() > 0);
    let mut m = sock(&s);
    m.send_text(&["RWLOCK.MLOCK", "2", "a", "c", "m", "2000", "WAIT", "0"]);
    await_parked(&mut c, 1);
    let mut y = sock(&s);
    y.send_text(&["RWLOCK.WLOCK", "c", "y", "2000", "WAIT", "0"]);
    await_parked(&mut c, 2);
    assert_eq!(c.cmd(&["EXISTS", "c"]).int(), 0, "c holds nothing");
    assert_eq!(queue(&mut c, "c"), vec!["m", "y"]);
    let r = c.cmd(&["RWLOCK.WLOCK", "d", "x", "1000", "WAIT", "0"]);
    assert!(r.err().starts_with("DEADLOCK"), "{r:?}");
    // Nothing changed: x lets a go, m is served, then y.
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "a", "x"]).int(), 1);
    assert_eq!(m.reply("MLOCK a c").array().len(), 2);
    parked(&mut y, "WLOCK c");
    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", "c", "m"]).int(), 1);
    assert!(y.reply("WLOCK c").int() > 0);
}
