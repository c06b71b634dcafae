//! Waiting inside the server: `WAIT ms` on RWLOCK.RLOCK / RWLOCK.WLOCK / LEADER.CAMPAIGN,
//! queue order, hand-off at release and lapse, waiters that leave, keys that go away, and
//! fairness under contention. Each test starts its own server; each waiter has its own
//! connection.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, sleep};
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

const LONG: i64 = 60_000;
/// A WAIT long enough never to run out during a test.
const PATIENT: i64 = 20_000;

fn start() -> (Server, Connection) {
    let s = Server::start();
    let c = conn(&s);
    (s, c)
}

// ---------------------------------------------------------------------------------------------
// Basics

#[test]
fn wait_is_granted_at_once_when_free() {
    let (s, mut c) = start();
    let mut w = conn(&s);
    let t0 = Instant::now();
    let r = token(&r!(w, "RWLOCK.RLOCK", "r", "a", LONG, "WAIT", PATIENT));
    let wr = token(&r!(w, "RWLOCK.WLOCK", "w", "a", LONG, "WAIT", PATIENT));
    let e = token(&r!(w, "LEADER.CAMPAIGN", "e", "a", LONG, "WAIT", PATIENT));
    // Readers share, even with WAIT; reentrant and renewal requests with WAIT answer at once.
    token(&r!(c, "RWLOCK.RLOCK", "r", "b", LONG, "WAIT", PATIENT));
    assert_eq!(
        token(&r!(w, "RWLOCK.WLOCK", "w", "a", LONG, "WAIT", PATIENT)),
        wr
    );
    assert_eq!(
        token(&r!(w, "LEADER.CAMPAIGN", "e", "a", LONG, "WAIT", PATIENT)),
        e
    );
    assert_eq!(
        token(&r!(w, "RWLOCK.WLOCK", "w", "a", LONG, "WAIT", 0)),
        wr,
        "WAIT 0 on a held-by-me lock"
    );
    assert!(r < wr && wr < e);
    let elapsed = t0.elapsed();
    assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
}

fn assert_times_out(c: &mut Connection, args: &[&str], ms: u64) {
    let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
    let t0 = Instant::now();
    let v = exec_args(c, &argv).expect("io");
    let took = t0.elapsed();
    assert!(is_nil(&v), "{args:?}: {v:?}");
    assert!(
        took >= Duration::from_millis(ms - 5),
        "{args:?}: nil after {took:?}, before its {ms} ms"
    );
    assert!(
        took < Duration::from_millis(ms + 1500),
        "{args:?}: nil only after {took:?} (WAIT {ms})"
    );
    println!("{} WAIT {ms}: nil after {took:?}", args[0]);
}

#[test]
fn wait_times_out_with_nil() {
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.WLOCK", "k", "holder", LONG));
    token(&r!(c, "LEADER.CAMPAIGN", "e", "leader", LONG));
    let mut w = conn(&s);
    assert_times_out(
        &mut w,
        &["RWLOCK.RLOCK", "k", "a", "1000", "WAIT", "300"],
        300,
    );
    assert_times_out(
        &mut w,
        &["RWLOCK.WLOCK", "k", "a", "1000", "WAIT", "300"],
        300,
    );
    assert_times_out(
        &mut w,
        &["LEADER.CAMPAIGN", "e", "a", "1000", "WAIT", "300"],
        300,
    );
    // The timed-out waiters left their queues; nothing was granted to them.
    let ok = eventually(Duration::from_secs(5), || {
        lock_info(&mut c, "k").waiters == 0
    });
    assert!(ok, "{:?}", lock_info(&mut c, "k"));
    assert_eq!(lock_info(&mut c, "k").owners(), ["holder"]);
    let ok = eventually(Duration::from_secs(5), || {
        lease_info(&mut c)["lease_waiters"] == "0"
    });
    assert!(ok);
    assert_eq!(text(&array(&r!(c, "LEADER.CURRENT", "e"))[0]), "leader");
    // After the holder leaves, the key is gone (no stale waiter keeps it).
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "holder")), 1);
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "leader")), 1);
    assert_eq!(exists(&mut c, "e"), 0);
    assert_eq!(lease_info(&mut c)["lease_wait_timeouts"], "3");
}

#[test]
fn wait_zero_waits_without_limit() {
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.WLOCK", "k", "holder", LONG));
    token(&r!(c, "LEADER.CAMPAIGN", "e", "leader", LONG));
    let mut w1 = conn(&s);
    let mut w2 = conn(&s);
    send!(w1, "RWLOCK.WLOCK", "k", "a", LONG, "WAIT", 0);
    send!(w2, "LEADER.CAMPAIGN", "e", "b", LONG, "WAIT", 0);
    await_waiters(&mut c, "k", 1);
    sleep(Duration::from_millis(1200));
    assert_eq!(lock_info(&mut c, "k").waiters, 1, "WAIT 0 gave up");
    assert_eq!(lease_info(&mut c)["lease_waiters"], "2");
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "holder")), 1);
    let t = token(&recv(&mut w1));
    assert_eq!(
        lock_info(&mut c, "k").holder("a", "write").unwrap().token,
        t
    );
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "leader")), 1);
    let term = token(&recv(&mut w2));
    let cur = r!(c, "LEADER.CURRENT", "e");
    assert_eq!(text(&array(&cur)[0]), "b");
    assert_eq!(int(&array(&cur)[1]), term);
}

/// Waits (up to 10 s) until the server has exactly `n` waiters in all.
fn await_all_waiters(c: &mut Connection, n: usize) {
    let mut last = String::new();
    let ok = eventually(Duration::from_secs(10), || {
        last = lease_info(c)["lease_waiters"].clone();
        last == n.to_string()
    });
    assert!(ok, "expected {n} waiters in all, still {last}");
}

// ---------------------------------------------------------------------------------------------
// Order

#[test]
fn writers_are_granted_in_arrival_order() {
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.WLOCK", "k", "holder", LONG));
    let n = 6;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut workers = Vec::new();
    for i in 0..n {
        let mut w = conn(&s);
        send!(
            w,
            "RWLOCK.WLOCK",
            "k",
            format!("w{i}"),
            LONG,
            "WAIT",
            PATIENT
        );
        await_waiters(&mut c, "k", i as i64 + 1);
        let order = order.clone();
        workers.push(thread::spawn(move || {
            let t = token(&recv(&mut w));
            order.lock().unwrap().push((i, t));
            sleep(Duration::from_millis(5));
            assert_eq!(int(&r!(w, "RWLOCK.UNLOCK", "k", format!("w{i}"))), 1);
        }));
    }
    assert_eq!(lock_info(&mut c, "k").owners(), ["holder"]);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "holder")), 1);
    for w in workers {
        w.join().unwrap();
    }
    let order = order.lock().unwrap().clone();
    let who: Vec<usize> = order.iter().map(|o| o.0).collect();
    assert_eq!(who, (0..n).collect::<Vec<_>>(), "grant order");
    assert!(order.windows(2).all(|p| p[0].1 < p[1].1), "{order:?}");
    assert_eq!(exists(&mut c, "k"), 0);
}

#[test]
fn candidates_are_elected_in_arrival_order() {
    let (s, mut c) = start();
    let t0 = token(&r!(c, "LEADER.CAMPAIGN", "e", "first", LONG));
    let mut ws = Vec::new();
    for i in 0..4 {
        let mut w = conn(&s);
        send!(
            w,
            "LEADER.CAMPAIGN",
            "e",
            format!("c{i}"),
            LONG,
            "WAIT",
            PATIENT
        );
        await_all_waiters(&mut c, i + 1);
        ws.push(w);
    }
    let mut last = t0;
    let mut leader = "first".to_string();
    for (i, w) in ws.iter_mut().enumerate() {
        assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", &leader)), 1);
        let term = token(&recv(w));
        assert!(term > last, "terms increase: {last} then {term}");
        last = term;
        leader = format!("c{i}");
        let cur = r!(c, "LEADER.CURRENT", "e");
        assert_eq!(text(&array(&cur)[0]), leader);
        assert_eq!(int(&array(&cur)[1]), term);
    }
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", &leader)), 1);
    assert_eq!(exists(&mut c, "e"), 0);
}

#[test]
fn a_new_reader_does_not_overtake_a_queued_writer() {
    let (s, mut c) = start();
    let ta = token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    let mut w = conn(&s);
    send!(w, "RWLOCK.WLOCK", "k", "w", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k", 1);
    // Without WAIT: refused although only readers hold.
    assert!(is_nil(&r!(c, "RWLOCK.RLOCK", "k", "r", LONG)));
    // With WAIT: queued behind the writer.
    let mut r = conn(&s);
    send!(r, "RWLOCK.RLOCK", "k", "r", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k", 2);
    // A current holder's reentrant request is not a new request: granted at once.
    assert_eq!(token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG)), ta);
    assert_eq!(lock_info(&mut c, "k").holder("a", "read").unwrap().count, 2);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "a")), 1);
    let tw = token(&recv(&mut w));
    assert!(tw > ta);
    let i = lock_info(&mut c, "k");
    assert_eq!((i.mode.as_str(), i.waiters), ("write", 1), "{i:?}");
    assert_eq!(i.owners(), ["w"]);
    assert_eq!(int(&r!(w, "RWLOCK.UNLOCK", "k", "w")), 1);
    let tr = token(&recv(&mut r));
    assert!(tr > tw);
    assert_eq!(lock_info(&mut c, "k").owners(), ["r"]);
}

#[test]
fn a_run_of_readers_at_the_head_is_granted_together() {
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    let mut conns = Vec::new();
    for (i, (owner, cmd)) in [
        ("r1", "RWLOCK.RLOCK"),
        ("r2", "RWLOCK.RLOCK"),
        ("r3", "RWLOCK.RLOCK"),
        ("w", "RWLOCK.WLOCK"),
        ("r4", "RWLOCK.RLOCK"),
    ]
    .into_iter()
    .enumerate()
    {
        let mut x = conn(&s);
        send!(x, cmd, "k", owner, LONG, "WAIT", PATIENT);
        await_waiters(&mut c, "k", i as i64 + 1);
        conns.push((owner, x));
    }
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "h")), 1);
    let mut tokens = Vec::new();
    for (_, x) in conns.iter_mut().take(3) {
        tokens.push(token(&recv(x)));
    }
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "read");
    assert_eq!(i.owners(), ["r1", "r2", "r3"]);
    assert_eq!(i.waiters, 2, "the writer and r4 still wait");
    assert!(tokens.windows(2).all(|p| p[0] < p[1]), "{tokens:?}");
    for o in ["r1", "r2"] {
        assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", o)), 1);
    }
    assert_eq!(lock_info(&mut c, "k").waiters, 2);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "r3")), 1);
    let tw = token(&recv(&mut conns[3].1));
    assert!(tw > tokens[2]);
    let i = lock_info(&mut c, "k");
    assert_eq!((i.mode.as_str(), i.waiters), ("write", 1));
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "w")), 1);
    token(&recv(&mut conns[4].1));
    assert_eq!(lock_info(&mut c, "k").owners(), ["r4"]);
}

#[test]
fn a_waiting_upgrade_is_granted_and_a_second_one_is_a_deadlock() {
    let (s, mut c) = start();
    let mut a = conn(&s);
    let mut b = conn(&s);
    let ta = token(&r!(a, "RWLOCK.RLOCK", "k", "a", LONG));
    token(&r!(b, "RWLOCK.RLOCK", "k", "b", LONG));
    send!(a, "RWLOCK.WLOCK", "k", "a", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k", 1);
    let t0 = Instant::now();
    let v = r!(b, "RWLOCK.WLOCK", "k", "b", LONG, "WAIT", PATIENT);
    assert!(t0.elapsed() < Duration::from_secs(2), "not at once");
    let e = err(&v);
    assert!(e.starts_with("DEADLOCK"), "{e}");
    let i = lock_info(&mut c, "k");
    assert_eq!(i.owners(), ["a", "b"]);
    assert_eq!(i.waiters, 1);
    // A new reader waits behind the upgrade.
    assert!(is_nil(&r!(c, "RWLOCK.RLOCK", "k", "r", LONG)));
    assert_eq!(int(&r!(b, "RWLOCK.UNLOCK", "k", "b")), 1);
    let tu = token(&recv(&mut a));
    assert!(tu > ta, "the upgrade is a new grant");
    let i = lock_info(&mut c, "k");
    assert_eq!(i.mode, "write");
    assert_eq!(i.holder("a", "write").unwrap().count, 1);
    assert_eq!(i.holder("a", "read").unwrap().count, 1);
    assert_eq!(i.waiters, 0);
}

// ---------------------------------------------------------------------------------------------
// Hand-off timing

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    percentile(&mut v, 50.0)
}

#[test]
fn hand_off_after_unlock_is_immediate() {
    let (s, mut c) = start();
    let mut h = conn(&s);
    let mut w = conn(&s);
    let mut lat = Vec::new();
    for round in 0..20 {
        let (holder, waiter) = if round % 2 == 0 {
            (&mut h, &mut w)
        } else {
            (&mut w, &mut h)
        };
        token(&r!(holder, "RWLOCK.WLOCK", "k", "holder", LONG));
        send!(waiter, "RWLOCK.WLOCK", "k", "waiter", LONG, "WAIT", PATIENT);
        await_waiters(&mut c, "k", 1);
        let t0 = Instant::now();
        assert_eq!(int(&r!(holder, "RWLOCK.UNLOCK", "k", "holder")), 1);
        token(&recv(waiter));
        lat.push(t0.elapsed().as_secs_f64() * 1000.0);
        assert_eq!(int(&r!(waiter, "RWLOCK.UNLOCK", "k", "waiter")), 1);
    }
    let max = lat.iter().cloned().fold(0.0, f64::max);
    println!(
        "hand-off after UNLOCK (UNLOCK sent to waiter's reply, incl. the UNLOCK round trip): \
         median {:.2} ms, max {:.2} ms over {} rounds",
        median(&lat),
        max,
        lat.len()
    );
    assert!(max < 200.0, "hand-off took {max:.1} ms");
}

/// Measures how long after a lease deadline its waiter gets the grant. `grant` takes the
/// lease (ttl ms) and answers its ttl left; `wait` is the waiter's request.
fn lapse_lateness(
    c: &mut Connection,
    w: &mut Connection,
    ttl: u64,
    grant: &dyn Fn(&mut Connection) -> i64,
    wait: &dyn Fn(&mut Connection),
) -> f64 {
    let sent = Instant::now();
    let left = grant(c);
    let got = Instant::now();
    // The server read its clock between `sent` and `got`.
    let deadline = sent + (got - sent) / 2 + Duration::from_millis(left as u64);
    assert!(left as u64 <= ttl);
    wait(w);
    let v = recv(w);
    let at = Instant::now();
    token(&v);
    if at >= deadline {
        (at - deadline).as_secs_f64() * 1000.0
    } else {
        -((deadline - at).as_secs_f64() * 1000.0)
    }
}

#[test]
fn a_lapsed_lease_is_handed_to_its_waiter_without_any_other_command() {
    let (s, mut c) = start();
    let mut w = conn(&s);
    let mut late = Vec::new();
    for round in 0..6 {
        let key = format!("k{round}");
        let k2 = key.clone();
        let l = lapse_lateness(
            &mut c,
            &mut w,
            300,
            &|c| {
                token(&r!(c, "RWLOCK.WLOCK", &key, "h", 300));
                lock_info(c, &key).holder("h", "write").unwrap().ttl
            },
            &|w| send!(w, "RWLOCK.WLOCK", &k2, "w", LONG, "WAIT", PATIENT),
        );
        late.push(l);
        let i = lock_info(&mut c, &key);
        assert_eq!(i.owners(), ["w"]);
    }
    let mut leader = Vec::new();
    for round in 0..4 {
        let key = format!("e{round}");
        let k2 = key.clone();
        let l = lapse_lateness(
            &mut c,
            &mut w,
            300,
            &|c| {
                token(&r!(c, "LEADER.CAMPAIGN", &key, "h", 300));
                int(&array(&r!(c, "LEADER.CURRENT", &key))[2])
            },
            &|w| send!(w, "LEADER.CAMPAIGN", &k2, "w", LONG, "WAIT", PATIENT),
        );
        leader.push(l);
        let cur = r!(c, "LEADER.CURRENT", &key);
        assert_eq!(text(&array(&cur)[0]), "w");
    }
    println!("lock lapse to waiter's grant, ms after the deadline: {late:.1?}");
    println!("leader lapse to waiter's election, ms after the deadline: {leader:.1?}");
    for l in late.iter().chain(&leader) {
        assert!(*l > -3.0, "granted {:.1} ms before the deadline", -l);
        assert!(*l < 100.0, "granted {l:.1} ms after the deadline");
    }
}

#[test]
fn resign_and_lapse_hand_leadership_to_the_first_waiting_candidate() {
    let (s, mut c) = start();
    let ta = token(&r!(c, "LEADER.CAMPAIGN", "e", "a", LONG));
    let mut b = conn(&s);
    let mut d = conn(&s);
    send!(b, "LEADER.CAMPAIGN", "e", "b", 400, "WAIT", PATIENT);
    await_all_waiters(&mut c, 1);
    send!(d, "LEADER.CAMPAIGN", "e", "d", LONG, "WAIT", PATIENT);
    await_all_waiters(&mut c, 2);
    assert!(is_nil(&r!(c, "LEADER.CAMPAIGN", "e", "x", LONG)));
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "a")), 1);
    let tb = token(&recv(&mut b));
    assert!(tb > ta);
    let cur = r!(c, "LEADER.CURRENT", "e");
    assert_eq!(text(&array(&cur)[0]), "b");
    assert_eq!(int(&array(&cur)[1]), tb);
    // b's lease (400 ms) lapses; d is elected by the server with no other command.
    let td = token(&recv(&mut d));
    assert!(td > tb);
    let cur = r!(c, "LEADER.CURRENT", "e");
    assert_eq!(text(&array(&cur)[0]), "d");
    assert!(is_nil(&r!(b, "LEADER.RENEW", "e", "b", 1000)));
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
}

// ---------------------------------------------------------------------------------------------
// Waiters that leave

#[test]
fn a_waiter_that_leaves_is_never_granted() {
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    let mut ws: Vec<(Connection, i64)> = Vec::new();
    for i in 0..4 {
        let mut w = conn(&s);
        let id = client_id(&mut w);
        // w2 waits 1.5 s only: its wait ends while the others wait on.
        let patience = if i == 2 { 1_500 } else { PATIENT };
        send!(
            w,
            "RWLOCK.WLOCK",
            "k",
            format!("w{i}"),
            LONG,
            "WAIT",
            patience
        );
        await_waiters(&mut c, "k", i + 1);
        ws.push((w, id));
    }
    // w0: killed.
    assert_eq!(int(&r!(c, "CLIENT", "KILL", "ID", ws[0].1)), 1);
    await_waiters(&mut c, "k", 3);
    // w1: its connection closes.
    let (w1, _) = ws.remove(1);
    drop(w1);
    await_waiters(&mut c, "k", 2);
    // w2 (now at index 1): CLIENT UNBLOCK leaves a module-owned wait alone (the module
    // answers every wait itself, so no reply can be lost); its own WAIT ends it with nil.
    assert_eq!(int(&r!(c, "CLIENT", "UNBLOCK", ws[1].1)), 0);
    assert!(is_nil(&recv(&mut ws[1].0)));
    await_waiters(&mut c, "k", 1);
    // w2's connection still works and holds nothing.
    assert_eq!(int(&r!(ws[1].0, "RWLOCK.UNLOCK", "k", "w2")), 0);
    // The next in line is w3.
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "h")), 1);
    let t3 = token(&recv(&mut ws[2].0));
    let i = lock_info(&mut c, "k");
    assert_eq!(i.owners(), ["w3"], "{i:?}");
    assert_eq!(i.holder("w3", "write").unwrap().token, t3);
    assert_eq!(i.waiters, 0);
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "w3")), 1);
    assert_eq!(exists(&mut c, "k"), 0, "a departed waiter keeps the key");
    // The killed and the disconnected client count as waiters that left; w2 as a timeout.
    let stats = lease_info(&mut c);
    assert_eq!(stats["lease_waiters_left"], "2", "{stats:?}");
    assert_eq!(stats["lease_wait_timeouts"], "1", "{stats:?}");
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");

    // The same for elections.
    token(&r!(c, "LEADER.CAMPAIGN", "e", "h", LONG));
    let mut x = conn(&s);
    let xid = client_id(&mut x);
    let mut y = conn(&s);
    send!(x, "LEADER.CAMPAIGN", "e", "x", LONG, "WAIT", PATIENT);
    await_all_waiters(&mut c, 1);
    send!(y, "LEADER.CAMPAIGN", "e", "y", LONG, "WAIT", PATIENT);
    await_all_waiters(&mut c, 2);
    assert_eq!(int(&r!(c, "CLIENT", "KILL", "ID", xid)), 1);
    await_all_waiters(&mut c, 1);
    assert_eq!(int(&r!(c, "LEADER.RESIGN", "e", "h")), 1);
    token(&recv(&mut y));
    assert_eq!(text(&array(&r!(c, "LEADER.CURRENT", "e"))[0]), "y");
}

#[test]
fn a_waiter_that_leaves_at_the_head_lets_the_next_one_in_when_free() {
    // Readers hold; a writer waits at the head with a reader behind it. When the writer
    // leaves, the reader behind it can be granted at once (it was only waiting for its turn).
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.RLOCK", "k", "a", LONG));
    let mut w = conn(&s);
    let mut r = conn(&s);
    let wid = client_id(&mut w);
    send!(w, "RWLOCK.WLOCK", "k", "w", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k", 1);
    send!(r, "RWLOCK.RLOCK", "k", "r", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k", 2);
    assert_eq!(int(&r!(c, "CLIENT", "KILL", "ID", wid)), 1);
    drop(w);
    let t0 = Instant::now();
    token(&recv(&mut r));
    println!(
        "reader behind a departed writer granted after {:?}",
        t0.elapsed()
    );
    let i = lock_info(&mut c, "k");
    assert_eq!(i.owners(), ["a", "r"]);
    assert_eq!(i.waiters, 0);
}

// ---------------------------------------------------------------------------------------------
// Keys that go away

fn park_two(s: &Server, c: &mut Connection, key: &str) -> (Connection, Connection) {
    let mut w1 = conn(s);
    let mut w2 = conn(s);
    send!(w1, "RWLOCK.WLOCK", key, "w1", LONG, "WAIT", PATIENT);
    await_waiters(c, key, 1);
    send!(w2, "RWLOCK.RLOCK", key, "w2", LONG, "WAIT", 0);
    await_waiters(c, key, 2);
    (w1, w2)
}

fn assert_gone(w: &mut Connection) {
    let v = recv(w);
    let e = err(&v);
    assert!(e.starts_with("LOCKGONE"), "{e}");
}

#[test]
fn del_flushall_and_rename_answer_the_waiters() {
    let (s, mut c) = start();
    // DEL
    let t = token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    let (mut w1, mut w2) = park_two(&s, &mut c, "k");
    assert_eq!(int(&r!(c, "DEL", "k")), 1);
    assert_gone(&mut w1);
    assert_gone(&mut w2);
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
    assert_eq!(exists(&mut c, "k"), 0);
    // The connections still work, and the key's tokens still increase.
    let t2 = token(&r!(w1, "RWLOCK.WLOCK", "k", "w1", LONG));
    assert!(t2 > t);
    assert_eq!(int(&r!(w1, "RWLOCK.UNLOCK", "k", "w1")), 1);

    // FLUSHALL, with a lock and an election waiting.
    token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    token(&r!(c, "LEADER.CAMPAIGN", "e", "h", LONG));
    let (mut w1, mut w2) = park_two(&s, &mut c, "k");
    let mut w3 = conn(&s);
    send!(w3, "LEADER.CAMPAIGN", "e", "w3", LONG, "WAIT", PATIENT);
    await_all_waiters(&mut c, 3);
    assert_eq!(text(&r!(c, "FLUSHALL")), "OK");
    assert_gone(&mut w1);
    assert_gone(&mut w2);
    assert_gone(&mut w3);
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
    assert_eq!(int(&r!(c, "DBSIZE")), 0);

    // RENAME: the waiters of the old name are answered; the holder moves with the value.
    let th = token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    let (mut w1, mut w2) = park_two(&s, &mut c, "k");
    assert_eq!(text(&r!(c, "RENAME", "k", "k2")), "OK");
    assert_gone(&mut w1);
    assert_gone(&mut w2);
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
    let i = lock_info(&mut c, "k2");
    assert_eq!(i.owners(), ["h"]);
    assert_eq!(i.holder("h", "write").unwrap().token, th);
    // (Its waiter count: see renamed_key_keeps_no_stale_waiters.)
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k2", "h")), 1);
    assert_eq!(exists(&mut c, "k2"), 0);

    // FLUSHDB too (on db 0).
    token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    let (mut w1, mut w2) = park_two(&s, &mut c, "k");
    assert_eq!(text(&r!(c, "FLUSHDB")), "OK");
    assert_gone(&mut w1);
    assert_gone(&mut w2);
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
    let stats = lease_info(&mut c);
    assert_ne!(stats["lease_waiters_lockgone"], "0", "{stats:?}");
}

#[test]
fn renamed_key_keeps_no_stale_waiters() {
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.WLOCK", "k", "h", 500));
    let (mut w1, mut w2) = park_two(&s, &mut c, "k");
    assert_eq!(text(&r!(c, "RENAME", "k", "k2")), "OK");
    assert_gone(&mut w1);
    assert_gone(&mut w2);
    let i = lock_info(&mut c, "k2");
    assert_eq!(
        i.waiters, 0,
        "RENAME k k2 with 2 answered waiters: INFO k2 {i:?}"
    );
    // When the holder's lease ends, the key goes (nothing is held or awaited).
    let gone = eventually(Duration::from_secs(3), || exists(&mut c, "k2") == 0);
    assert!(
        gone,
        "k2 outlived its only lease: PTTL {:?}, INFO {:?}",
        r!(c, "PTTL", "k2"),
        lock_info(&mut c, "k2")
    );
}

// ---------------------------------------------------------------------------------------------
// No blocking where Redis cannot block

#[test]
fn wait_does_not_block_in_multi_or_scripts() {
    let (s, mut c) = start();
    token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    token(&r!(c, "LEADER.CAMPAIGN", "e", "h", LONG));
    let mut w = conn(&s);
    let t0 = Instant::now();
    assert_eq!(text(&r!(w, "MULTI")), "OK");
    for v in [
        r!(w, "RWLOCK.WLOCK", "k", "w", LONG, "WAIT", PATIENT),
        r!(w, "RWLOCK.RLOCK", "k", "w", LONG, "WAIT", 0),
        r!(w, "LEADER.CAMPAIGN", "e", "w", LONG, "WAIT", 0),
        r!(w, "RWLOCK.WLOCK", "free", "w", LONG, "WAIT", 0),
    ] {
        assert_eq!(text(&v), "QUEUED");
    }
    let v = r!(w, "EXEC");
    let replies = array(&v);
    assert!(is_nil(&replies[0]), "{v:?}");
    assert!(is_nil(&replies[1]), "{v:?}");
    assert!(is_nil(&replies[2]), "{v:?}");
    let tf = token(&replies[3]);
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "MULTI blocked: {:?}",
        t0.elapsed()
    );
    assert_eq!(
        lock_info(&mut c, "free")
            .holder("w", "write")
            .unwrap()
            .token,
        tf
    );

    let t0 = Instant::now();
    for (script, key) in [
        (
            "return redis.call('RWLOCK.WLOCK', KEYS[1], 'w', '60000', 'WAIT', '0')",
            "k",
        ),
        (
            "return redis.call('RWLOCK.RLOCK', KEYS[1], 'w', '60000', 'WAIT', '20000')",
            "k",
        ),
        (
            "return redis.call('LEADER.CAMPAIGN', KEYS[1], 'w', '60000', 'WAIT', '0')",
            "e",
        ),
    ] {
        let v = r!(w, "EVAL", script, 1, key);
        assert!(is_nil(&v), "{script}: {v:?}");
    }
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "EVAL blocked: {:?}",
        t0.elapsed()
    );
    let v = r!(
        w,
        "EVAL",
        "return redis.call('RWLOCK.RLOCK', KEYS[1], 'w', '60000', 'WAIT', '0')",
        1,
        "free2"
    );
    token(&v);
    let i = lock_info(&mut c, "k");
    assert_eq!((i.owners(), i.waiters), (vec!["h".to_string()], 0));
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
    assert_eq!(lease_info(&mut c)["lease_waits"], "0");
}

#[test]
fn max_waiters_limits_each_queue() {
    let (s, mut c) = start();
    assert_eq!(
        text(&r!(c, "CONFIG", "SET", "lease.max-waiters", "2")),
        "OK"
    );
    token(&r!(c, "RWLOCK.WLOCK", "k", "h", LONG));
    let mut w1 = conn(&s);
    let mut w2 = conn(&s);
    send!(w1, "RWLOCK.WLOCK", "k", "w1", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k", 1);
    send!(w2, "RWLOCK.RLOCK", "k", "w2", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k", 2);
    let mut w3 = conn(&s);
    let e = err(&r!(w3, "RWLOCK.WLOCK", "k", "w3", LONG, "WAIT", PATIENT));
    assert!(
        e.contains("too many waiters") && e.contains("lease.max-waiters"),
        "{e}"
    );
    assert!(
        is_nil(&r!(w3, "RWLOCK.WLOCK", "k", "w3", LONG)),
        "no WAIT: plain nil"
    );
    assert_eq!(lock_info(&mut c, "k").waiters, 2);
    // Another key has its own queue.
    token(&r!(c, "RWLOCK.WLOCK", "k2", "h", LONG));
    send!(w3, "RWLOCK.WLOCK", "k2", "w3", LONG, "WAIT", PATIENT);
    await_waiters(&mut c, "k2", 1);
    // Elections too.
    token(&r!(c, "LEADER.CAMPAIGN", "e", "h", LONG));
    let mut e1 = conn(&s);
    let mut e2 = conn(&s);
    send!(e1, "LEADER.CAMPAIGN", "e", "e1", LONG, "WAIT", PATIENT);
    send!(e2, "LEADER.CAMPAIGN", "e", "e2", LONG, "WAIT", PATIENT);
    await_all_waiters(&mut c, 5);
    let mut e3 = conn(&s);
    let e = err(&r!(e3, "LEADER.CAMPAIGN", "e", "e3", LONG, "WAIT", PATIENT));
    assert!(e.contains("too many waiters"), "{e}");
    // The queue still works.
    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", "h")), 1);
    token(&recv(&mut w1));
    assert_eq!(int(&r!(w1, "RWLOCK.UNLOCK", "k", "w1")), 1);
    token(&recv(&mut w2));
}

// ---------------------------------------------------------------------------------------------
// Fairness

#[test]
fn contending_writers_share_the_lock_fairly() {
    let s = Server::start();
    let workers = 8;
    let target = 480;
    let total = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..workers)
        .map(|i| {
            let mut c = conn(&s);
            let total = total.clone();
            let stop = stop.clone();
            thread::spawn(move || {
                let owner = format!("worker-{i}");
                let (mut count, mut waits) = (0usize, Vec::new());
                let limit = Instant::now() + Duration::from_secs(30);
                while !stop.load(Ordering::Relaxed) && Instant::now() < limit {
                    let t0 = Instant::now();
                    let v = r!(c, "RWLOCK.WLOCK", "k", &owner, 5_000, "WAIT", PATIENT);
                    token(&v);
                    waits.push(t0.elapsed().as_secs_f64() * 1000.0);
                    sleep(Duration::from_millis(2));
                    assert_eq!(int(&r!(c, "RWLOCK.UNLOCK", "k", &owner)), 1);
                    count += 1;
                    if total.fetch_add(1, Ordering::Relaxed) + 1 >= target {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                (count, waits)
            })
        })
        .collect();
    let results: Vec<(usize, Vec<f64>)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let elapsed = started.elapsed();
    let counts: Vec<usize> = results.iter().map(|r| r.0).collect();
    let mut waits: Vec<f64> = results.iter().flat_map(|r| r.1.iter().cloned()).collect();
    let p50 = percentile(&mut waits, 50.0);
    let p99 = percentile(&mut waits, 99.0);
    println!(
        "fairness: {} grants in {elapsed:?} to {workers} writers holding 2 ms each: counts {counts:?}; \
         wait p50 {p50:.2} ms, p99 {p99:.2} ms",
        counts.iter().sum::<usize>()
    );
    let (min, max) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    assert!(
        min as f64 >= 0.8 * max as f64,
        "unfair: counts {counts:?} (min {min} < 80% of max {max})"
    );
    let mut c = conn(&s);
    assert_eq!(exists(&mut c, "k"), 0);
    assert_eq!(lease_info(&mut c)["lease_waiters"], "0");
}
