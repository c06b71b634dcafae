//! Costs that must not grow with the queue: the DEADLOCK check of an upgrade looks only at the
//! write requests of current holders (an index), never at every waiter.

use std::time::{Duration, Instant};

use redis_lease_core::{Acquire, LockError, Mode, Request, RwLock, Wait};

use crate::harness::{id, World};

const QUEUED: usize = 20_000;

fn req(owner: &[u8], mode: Mode, waiter: u64) -> Request<'static> {
    Request {
        owner: id(owner),
        mode,
        ttl: 1_000_000,
        wait: Some(Wait::forever(waiter)),
        max_waiters: 100_000,
        max_hold: 0,
    }
}

/// Readers a and b hold; `writers` write requests of other owners (who hold nothing) wait;
/// then, if `late_writer`, a write request of reader c waits last of all.
fn key(writers: usize, late_writer: bool) -> (RwLock, World) {
    let mut world = World::at(1_000);
    let mut l = RwLock::default();
    let ask = |l: &mut RwLock, world: &mut World, owner: &[u8], mode| {
        let id = world.next_id();
        l.lock(&req(owner, mode, id), &mut world.env()).1
    };
    assert!(matches!(
        ask(&mut l, &mut world, b"h", Mode::Write),
        Ok(Acquire::Granted(_))
    ));
    for o in [&b"a"[..], b"b", b"c"] {
        assert_eq!(ask(&mut l, &mut world, o, Mode::Read), Ok(Acquire::Queued));
    }
    for i in 0..writers {
        let o = format!("writer-{i}");
        assert_eq!(
            ask(&mut l, &mut world, o.as_bytes(), Mode::Write),
            Ok(Acquire::Queued)
        );
    }
    if late_writer {
        assert_eq!(
            ask(&mut l, &mut world, b"c", Mode::Write),
            Ok(Acquire::Queued)
        );
    }
    let (c, _) = l.unlock(b"h", &mut world.env());
    assert_eq!(c.woken.len(), 3);
    assert_eq!(l.0.waiter_count(), writers + usize::from(late_writer));
    (l, world)
}

/// The time of `reps` upgrade requests of reader a with WAIT (each queued, then cancelled).
fn upgrade_time(l: &mut RwLock, world: &mut World, reps: usize) -> Duration {
    let start = Instant::now();
    for _ in 0..reps {
        let id = world.next_id();
        let (_, r) = l.lock(&req(b"a", Mode::Write, id), &mut world.env());
        assert_eq!(r, Ok(Acquire::Queued));
        assert!(l.cancel(id, &mut world.env()).1);
    }
    start.elapsed()
}

#[test]
fn an_upgrade_behind_20000_queued_writers_does_not_scan_them() {
    let reps = 300;
    let (mut small, mut w0) = key(0, false);
    let (mut large, mut w1) = key(QUEUED, false);
    // The best of seven rounds each, taken in turn, so a busy machine slows both alike.
    let (mut t0, mut t1) = (Duration::MAX, Duration::MAX);
    for _ in 0..7 {
        t0 = t0.min(upgrade_time(&mut small, &mut w0, reps));
        t1 = t1.min(upgrade_time(&mut large, &mut w1, reps));
    }
    // A scan of the queue per request costs some 20,000 times more; an index, a few tree
    // levels. 20x (and a floor against a clock too coarse for the small case) is generous.
    let allowed = 20 * t0.max(Duration::from_micros(200));
    eprintln!("{reps} upgrades: {t1:?} behind {QUEUED} writers, {t0:?} behind none");
    assert!(
        t1 < allowed,
        "{reps} upgrades: {t1:?} behind {QUEUED} writers, {t0:?} behind none"
    );
    assert_eq!(large.0.waiter_count(), QUEUED);
}

#[test]
fn a_readers_write_request_behind_20000_writers_still_counts_as_a_waiting_upgrade() {
    let (mut l, mut world) = key(QUEUED, true);
    let id = world.next_id();
    let (c, r) = l.lock(&req(b"a", Mode::Write, id), &mut world.env());
    assert_eq!(r, Err(LockError::UpgradeDeadlock));
    assert!(c.is_empty());
    // Once c's request has gone, a may wait to upgrade.
    let last = l.0.waiters().last().unwrap().id;
    assert!(l.cancel(last, &mut world.env()).1);
    let id = world.next_id();
    let (_, r) = l.lock(&req(b"a", Mode::Write, id), &mut world.env());
    assert_eq!(r, Ok(Acquire::Queued));
}
