//! An adversarial review of the hold-back (issue 20) over raw sockets: side paths around the
//! lobby and the quarantine, each checked for a reply that comes late, twice, or disagrees
//! with the state.

use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

fn send_text(w: &mut Sock, args: &[&str]) {
    let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
    w.send(&a);
}

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
        send_text(&mut r, &["RWLOCK.RLOCK", "k", "b", "1000", "WAIT", "9000"]);
        let mut m = Sock::connect(s.port);
        send_text(
            &mut m,
            &["SEMAPHORE.ACQUIRE", "s", "b", "3", "1000", "WAIT", "9000"],
        );
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
    send_text(&mut w, &["RWLOCK.WLOCK", "k", "w", "1000", "WAIT", "2000"]);
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
