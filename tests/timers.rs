//! The module keeps one Redis timer at most (`lease_timers` in INFO). Every timer's turn arms
//! the next, so a second timer, once made, would live for good; each one more makes every
//! `RedisModule_CreateTimer` walk past the others (they share a due time), and enough of them
//! stalled Redis 8.2.3 for seconds in the middle of ordinary waits.

use std::thread;
use std::time::{Duration, Instant};

use redis_lease_testkit::prelude::*;

fn timers(c: &mut Sock) -> i64 {
    c.lease_int("lease_timers")
}

/// Watches `lease_timers` for `d`: the most it showed.
fn most_timers_over(c: &mut Sock, d: Duration) -> i64 {
    let end = Instant::now() + d;
    let mut most = 0;
    while Instant::now() < end {
        most = most.max(timers(c));
        thread::sleep(Duration::from_millis(5));
    }
    most
}

/// The timer is due (a wait's deadline) but a slow command runs past it; later in the same
/// turn a command needs the timer at a later time. The overdue timer has not fired yet: it
/// must stay the only one, not get a twin.
#[test]
fn a_timer_overdue_inside_a_slow_turn_gets_no_twin() {
    let s = Server::with(debug_opts());
    let mut c = Sock::connect(s.port);
    let mut w = Sock::connect(s.port);
    for round in 0..20 {
        let (a, b) = (format!("a{round}"), format!("b{round}"));
        assert!(c.cmd(&["RWLOCK.WLOCK", &a, "x", "60000"]).int() > 0);
        // A wait ending 30 ms from now arms the timer for then.
        w.send_text(&["RWLOCK.WLOCK", &a, "w", "1000", "WAIT", "30"]);
        until(Duration::from_secs(5), "the wait parks", || {
            c.lease_int("lease_waiters") == 1
        });
        // One turn: a sleep past that deadline, then a lease that needs the timer later.
        c.send_pipeline(&[
            &["DEBUG", "SLEEP", "0.06"],
            &["RWLOCK.WLOCK", &b, "y", "200"],
        ]);
        assert_eq!(c.reply("DEBUG SLEEP").bytes(), b"OK");
        assert!(c.reply("WLOCK b").int() > 0);
        assert!(w.reply("WLOCK a (its wait ends)").is_nil());
        assert_eq!(c.cmd(&["RWLOCK.UNLOCK", &a, "x"]).int(), 1);
        assert!(
            timers(&mut c) <= 1,
            "round {round}: {} timers",
            timers(&mut c)
        );
    }
    // Every lease ends (the last at 200 ms): the timer's last turn finds nothing more to do.
    until(Duration::from_secs(5), "the timers end", || {
        timers(&mut c) == 0
    });
}

/// Waits that end in their hundreds, from many connections at once, several keys each: the
/// server keeps one timer and keeps answering at once.
#[test]
fn many_waits_that_end_keep_one_timer_and_a_quick_server() {
    let s = Server::start();
    let workers: Vec<_> = (0..8)
        .map(|i| {
            let port = s.port;
            thread::spawn(move || {
                let mut c = Sock::connect(port);
                let mut worst = Duration::ZERO;
                for r in 0..25 {
                    let (a, b) = (format!("a{i}:{r}"), format!("b{i}:{r}"));
                    assert!(c.cmd(&["RWLOCK.WLOCK", &a, "x", "60000"]).int() > 0);
                    let wait = ["20", "50", "80"][r % 3];
                    let mlock = ["RWLOCK.MLOCK", "2", &b, &a, "m", "60000", "WAIT", wait];
                    assert!(c.cmd(&mlock).is_nil());
                    for cmd in [&["EXISTS", &b][..], &["RWLOCK.INFO", &b], &["PING"]] {
                        let t = Instant::now();
                        c.cmd(cmd);
                        worst = worst.max(t.elapsed());
                    }
                    assert_eq!(c.cmd(&["RWLOCK.UNLOCK", &a, "x"]).int(), 1);
                }
                worst
            })
        })
        .collect();
    let mut c = Sock::connect(s.port);
    let most = most_timers_over(&mut c, Duration::from_millis(300));
    let worst = workers
        .into_iter()
        .map(|w| w.join().expect("worker"))
        .max()
        .unwrap();
    let most = most.max(timers(&mut c));
    assert!(most <= 1, "{most} timers at once");
    // Generous for a loaded CI machine; the stall this guards against lasted 4-8 s.
    assert!(
        worst < Duration::from_secs(2),
        "a plain command took {worst:?}"
    );
}
